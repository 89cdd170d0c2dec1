"""The UcmConnector's KV events (docs/vllm.md, "KV events") through vLLM's own event path.

Without engines: a worker's reuse report goes through vLLM's KVOutputAggregator (TP 2, rank 1
reports nothing), the scheduler side's update_connector_output / take_events, and vLLM's msgpack
encoding of a KVEventBatch, decoded with vLLM's own decoder; nothing is collected when vLLM's KV
events are off.

With engines (fp32, SmolLM2-135M-Instruct, three python3.11-doc pages cut at 2,000 characters,
2 tokens each): vLLM's ZmqEventPublisher connects to this test's SUB socket. Run 1 saves into a
fresh store; then, once the store holds the blocks, a short prompt gives vLLM the step that
carries the last saves' events. Every message decodes (msgspec.msgpack.Decoder(type=KVEventBatch))
with no sequence gap; the events of medium ucm.event_medium(store) name exactly the prompts' full
blocks, each one stored, with the store's token ids, parents and hash chain. Run 2, a fresh
process reading the store (save off) after one block of the third prompt was corrupted, gives
reuse reports of exactly the blocks vLLM kept: all loaded blocks of the first two prompts, and of
the third those before the engine block holding the corrupt one.

Runs in .venv-vllm (scripts/test_vllm.sh); about 2-4 minutes on 2 cores. This file is also the
runner of one vLLM process (`python test_vllm_events.py --store ...`).
"""
import argparse
import json
import os
import pickle
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace as NS

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "lib/python"))
MODEL = Path(os.environ.get("UCM_MODEL_DIR", ROOT / "models" / "SmolLM2-135M-Instruct"))
UCM_BIN = os.environ.get("UCM_BIN", str(ROOT / "build" / "bin" / "ucm"))
UCM_LIB = os.environ.setdefault("UCM_LIB", str(ROOT / "build" / "lib" / "libucm.so"))
DOCS_DIR = Path("/usr/share/doc/python3.11/html/_sources")
DOCS = ["library/gzip.rst.txt", "library/bisect.rst.txt", "library/keyword.rst.txt"]
CUT = 2000
TOPIC = "ucm-events-test"
BAD_BLOCK = 9          # the block of the third prompt corrupted before run 2
T = 16


# ---------------------------------------------------------------------------- without engines
def _worker(medium="ucm:test-store", tp_rank=0, tp_size=1, on=True):
    """The worker side of UcmConnector without __init__ (no engine, no store)."""
    from ucm.vllm import connector_events as events
    from ucm.vllm.connector import UcmConnector
    c = UcmConnector.__new__(UcmConnector)
    c.T, c.engine_block, c.tp_size, c._tp_rank = T, 128, tp_size, tp_rank
    c.event_medium = medium
    c._event_buf = events.EventBuffer() if on else None
    return c


def _scheduler(on=True, medium="ucm:test-store"):
    """The scheduler side without __init__ (no engine, no store: the announced blocks' check is
    not due within a test)."""
    from ucm.vllm import connector_events as events
    from ucm.vllm.connector import UcmConnector
    c = UcmConnector.__new__(UcmConnector)
    c._events_on, c._sched_events = on, []
    c.event_medium, c.store, c.ns, c.sched_stats = medium, None, None, {"store_errors": 0}
    c._announced = events.Announced() if on else None
    return c


def test_reuse_report_through_vllms_aggregator_publisher_encoding():
    import msgspec
    from vllm.distributed.kv_events import BlockStored, KVEventBatch
    from vllm.distributed.kv_transfer.kv_connector.utils import KVOutputAggregator
    from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
    from ucm.vllm.connector import UcmKVEvents
    from ucm.vllm.planner import LoadSpec

    h = np.arange(12 * 16, dtype=np.uint8).reshape(12, 16)
    ids = np.arange(1000, 1000 + 12 * T, dtype=np.uint32)
    # blocks 4..11 loaded (0..3 were vLLM's own prefix hit), vLLM keeps 4..7
    ld = LoadSpec("r", h, [1, 2, 3], 4 * T, 12 * T, ids[4 * T:])
    w0, w1 = _worker(tp_rank=0, tp_size=1), _worker(tp_rank=1, tp_size=1)
    w0._report_loads([ld], [4])
    w1._report_loads([ld], [4])                     # a rank other than 0 reports nothing
    ev0, ev1 = w0.get_kv_connector_kv_cache_events(), w1.get_kv_connector_kv_cache_events()
    assert isinstance(ev0, UcmKVEvents) and ev1 is None and w0.get_kv_connector_kv_cache_events() is None
    ev0 = pickle.loads(pickle.dumps(ev0))           # as the multiprocess executor sends it
    outs = [ModelRunnerOutput(req_ids=[], req_id_to_index={}, kv_connector_output=KVConnectorOutput(kv_cache_events=e))
            for e in (ev0, ev1)]
    agg = KVOutputAggregator(expected_finished_count=2).aggregate(outs)
    sched = _scheduler()
    sched.update_connector_output(agg.kv_connector_output)
    got = sched.take_events()
    assert sched.take_events() == []
    (e,) = got
    assert isinstance(e, BlockStored)
    assert e.block_hashes == [h[i].tobytes() for i in range(4, 8)] and e.parent_block_hash == h[3].tobytes()
    assert e.token_ids == ids[4 * T:8 * T].tolist() and e.block_size == T and e.medium == "ucm:test-store"
    assert e.lora_id is None and e.lora_name is None
    wire = msgspec.msgpack.Encoder().encode(KVEventBatch(ts=time.time(), events=got))
    (back,) = msgspec.msgpack.Decoder(type=KVEventBatch).decode(wire).events
    assert back == e

    # Two reporting workers: only what both reported is published.
    a, b = UcmKVEvents(), UcmKVEvents()
    x = BlockStored(block_hashes=[h[0].tobytes()], parent_block_hash=None, token_ids=ids[:T].tolist(), block_size=T,
                    lora_id=None, medium="ucm:s", lora_name=None)
    y = BlockStored(block_hashes=[h[1].tobytes()], parent_block_hash=h[0].tobytes(), token_ids=ids[T:2 * T].tolist(),
                    block_size=T, lora_id=None, medium="ucm:s", lora_name=None)
    a.add_events([x, y])
    b.add_events([x])
    outs = [ModelRunnerOutput(req_ids=[], req_id_to_index={}, kv_connector_output=KVConnectorOutput(kv_cache_events=e))
            for e in (a, b)]
    sched.update_connector_output(KVOutputAggregator(2).aggregate(outs).kv_connector_output)
    assert sched.take_events() == [x]


def test_nothing_collected_when_vllm_kv_events_are_off():
    from ucm.vllm.planner import LoadSpec
    w = _worker(on=False)
    h = np.zeros((2, 16), np.uint8)
    assert w.get_kv_connector_kv_cache_events() is None
    s = _scheduler(on=False)
    s.update_connector_output(NS(kv_cache_events=object()))
    assert s.take_events() == [] and s._sched_events == []
    assert LoadSpec("r", h, [0], 0, 32).tokens is None


# ---------------------------------------------------------------------------- the engine runner
def runner(argv):
    """One vLLM process: the connector on --store, KV events published to --endpoint."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--store", required=True)
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--save", action="store_true")
    ap.add_argument("--gc-after", action="store_true",
                    help="after the prompts: `ucm gc --max-bytes 0` (every block goes), then steps past the "
                         "connector's 5 s check of the blocks it announced")
    a = ap.parse_args(argv)
    from vllm import LLM, SamplingParams
    from vllm.config import KVEventsConfig, KVTransferConfig
    from vllm_run import shutdown_and_exit
    t0 = time.time()
    # vLLM's defaults: prefix caching on, kv_load_failure_policy unset (the connector sets "recompute")
    llm = LLM(model=str(MODEL), dtype="float32", max_model_len=2048, enforce_eager=True,
              seed=0, kv_transfer_config=KVTransferConfig(
                  kv_connector="UcmConnector", kv_connector_module_path="ucm.vllm.connector", kv_role="kv_both",
                  kv_connector_extra_config={"store": a.store, "save": a.save}),
              kv_events_config=KVEventsConfig(enable_kv_cache_events=True, publisher="zmq", endpoint=a.endpoint,
                                              topic=TOPIC))
    startup = time.time() - t0
    sp = SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True)
    outs = llm.generate(json.load(open(a.prompts)), sp, use_tqdm=False)
    res = [{"ids": list(o.prompt_token_ids), "num_cached_tokens": o.num_cached_tokens or 0} for o in outs]
    waited = 0.0
    if a.save:
        # The saves complete on the connector's thread after their step; their events go out with
        # the next step: wait until the store holds every full block, then give vLLM a step.
        import ucm
        t1 = time.time()
        st = ucm.Store(a.store, mode="r", refresh_interval_ms=100)
        ns = st.namespace(st.namespaces()[0]["id"])
        seed = ns.hash_seed
        while time.time() - t1 < 120:
            st.refresh()
            if all(st.lookup(ns, ucm.hash_blocks(seed, r["ids"], T)).present.all() for r in res):
                break
            time.sleep(0.2)
        st.close()
        time.sleep(0.5)
        waited = time.time() - t1
    gc = None
    if a.gc_after:
        g = subprocess.run([os.environ["UCM_BIN"], "gc", a.store, "--max-bytes", "0", "--grace", "0", "--json"],
                           capture_output=True, text=True)
        gc = {"returncode": g.returncode, "stderr": g.stderr[-2000:],
              "report": json.loads(g.stdout) if g.returncode == 0 else None}
        time.sleep(6.0)
        llm.generate(["Hello."], sp, use_tqdm=False)
    llm.generate(["Hi."], sp, use_tqdm=False)
    with open(a.out, "w") as f:
        json.dump({"results": res, "engine_block": llm.llm_engine.vllm_config.cache_config.block_size,
                   "startup_seconds": startup, "save_wait_seconds": waited, "gc": gc}, f)
    shutdown_and_exit(llm, "runner")


# ---------------------------------------------------------------------------- with engines
class Subscriber:
    """A SUB socket bound where vLLM's publisher connects (an endpoint without '*' is connected
    to), decoding every message with vLLM's own decoder, on a thread."""

    def __init__(self):
        import msgspec
        import zmq
        from vllm.distributed.kv_events import KVEventBatch
        self.decoder = msgspec.msgpack.Decoder(type=KVEventBatch)
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.SUB)
        self.sock.setsockopt_string(zmq.SUBSCRIBE, TOPIC)
        port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = f"tcp://127.0.0.1:{port}"
        self.batches, self.errors = [], []
        self._stop = False
        self._t = threading.Thread(target=self._loop, daemon=True)
        self._t.start()

    def _loop(self):
        import zmq
        while not self._stop:
            if not self.sock.poll(100):
                continue
            topic, seq, payload = self.sock.recv_multipart()
            try:
                self.batches.append((int.from_bytes(seq, "big"), self.decoder.decode(payload)))
            except Exception as e:  # every message must decode: asserted by the test
                self.errors.append(repr(e))

    def close(self):
        time.sleep(1.0)
        self._stop = True
        self._t.join()
        self.sock.close(linger=0)
        self.ctx.term()


def run_engine(tmp, name, store, prompts, save, gc_after=False):
    sub = Subscriber()
    pfile, out = tmp / f"{name}.prompts.json", tmp / f"{name}.out.json"
    pfile.write_text(json.dumps(prompts))
    cmd = [sys.executable, __file__, "--store", str(store), "--endpoint", sub.endpoint, "--prompts", str(pfile),
           "--out", str(out)] + (["--save"] if save else []) + (["--gc-after"] if gc_after else [])
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib/python"), "UCM_BIN": UCM_BIN, "UCM_LIB": UCM_LIB,
           "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    finally:
        sub.close()
    (tmp / f"{name}.stderr.txt").write_text(p.stderr)
    assert p.returncode == 0, f"{name}: exit {p.returncode}\n{p.stderr[-4000:]}"
    meta = json.loads(out.read_text())
    meta["seconds"] = time.time() - t0
    return sub, meta


def corrupt(store, hash_hex):
    blk = json.loads(subprocess.run([UCM_BIN, "inspect", str(store), "--block", hash_hex, "--json"],
                                    capture_output=True, text=True, check=True).stdout)["block"]
    rec = blk["kv"]
    top = Path(store) / "shards" / blk["shard"] if blk.get("shard") else Path(store)   # the connector's store is sharded
    data = top / "data" / f"{rec['file']:08d}.ucmd"
    b = bytearray(data.read_bytes())
    b[rec["offset"] + rec["length"] // 2] ^= 0xFF
    data.write_bytes(bytes(b))


def check_stream(sub, medium, st, ns):
    """Every message decoded, no sequence gap; the ucm events are well formed and match the store.
    Returns the ucm events' block hashes (with repeats) and the number of other events."""
    import ucm
    assert not sub.errors, sub.errors
    seqs = [s for s, _ in sub.batches]
    assert seqs == list(range(len(seqs))), f"sequence gap or reordering: {seqs}"
    seed = ns.hash_seed
    hashes, others = [], 0
    for _, batch in sub.batches:
        for e in batch.events:
            if getattr(e, "medium", None) != medium:
                others += 1
                continue
            assert type(e).__name__ == "BlockStored"
            assert e.block_size == T and e.lora_id is None and e.lora_name is None
            assert all(type(b) is bytes and len(b) == 16 for b in e.block_hashes)
            assert len(e.token_ids) == T * len(e.block_hashes)
            # the chain: MD5(parent || ids) from the root (parent None) or the given parent
            chain = ucm.hash_blocks(seed, e.token_ids, T, parent=e.parent_block_hash)
            assert [c.tobytes() for c in chain] == e.block_hashes
            assert st.lookup(ns, e.block_hashes).present.all()
            for i, b in enumerate(e.block_hashes):
                assert st.tokens(ns, b)[-T:].tolist() == e.token_ids[i * T:(i + 1) * T]
            hashes += e.block_hashes
    return hashes, others


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    if not MODEL.exists() or not all((DOCS_DIR / d).exists() for d in DOCS):
        pytest.skip("model or python3.11-doc documents missing")
    if not Path(UCM_BIN).exists():
        pytest.skip(f"no ucm binary at {UCM_BIN}")
    return tmp_path_factory.mktemp("vllm-events")


def test_saves_and_loads_published_as_vllm_kv_events(tmp):
    import ucm
    store = tmp / "store"
    medium = ucm.event_medium(str(store))
    assert medium == "ucm:store"
    prompts = [(DOCS_DIR / d).read_text()[:CUT] for d in DOCS]

    sub, meta = run_engine(tmp, "save", store, prompts, save=True)
    st = ucm.Store(str(store), mode="r")
    ns = st.namespace(st.namespaces()[0]["id"])
    seed = ns.hash_seed
    saved, others = check_stream(sub, medium, st, ns)
    chains = [ucm.hash_blocks(seed, r["ids"], T) for r in meta["results"]]
    expected = {h.tobytes() for c in chains for h in c}
    print(f"run 1 (save): {meta['seconds']:.0f} s (startup {meta['startup_seconds']:.0f} s, saves waited "
          f"{meta['save_wait_seconds']:.1f} s); {len(sub.batches)} batches; {len(saved)} ucm blocks reported "
          f"({len(expected)} full blocks in the prompts), {others} other events")
    assert saved, "no event of the ucm medium"
    assert set(saved) == expected

    eb = meta["engine_block"]
    third = chains[2]
    corrupt(store, third[BAD_BLOCK].tobytes().hex())
    st.close()

    sub, meta2 = run_engine(tmp, "load", store, prompts, save=False)
    st = ucm.Store(str(store), mode="r")
    ns = st.namespace(ns.id)
    reused, others = check_stream(sub, medium, st, ns)
    want = set()
    for i, (c, r) in enumerate(zip(chains, meta2["results"])):
        n_load = min(len(c) * T, len(r["ids"]) - 1) // eb * eb // T
        if i == 2:   # blocks before the engine block holding the corrupt one
            n_load = min(n_load, BAD_BLOCK * T // eb * eb // T)
        else:
            assert r["num_cached_tokens"] == n_load * T
        assert n_load > 0
        want |= {h.tobytes() for h in c[:n_load]}
    print(f"run 2 (load, block {BAD_BLOCK} of prompt 3 corrupt): {meta2['seconds']:.0f} s; {len(reused)} ucm blocks "
          f"reported as reused ({len(want)} expected), cached tokens {[r['num_cached_tokens'] for r in meta2['results']]}, "
          f"{others} other events")
    assert set(reused) == want and len(reused) == len(want)
    st.close()

    # Run 3: a server loads, then `ucm gc` removes every block while it runs: the blocks it
    # announced go out as BlockRemoved of the ucm medium (connector_events.Announced).
    sub, meta3 = run_engine(tmp, "gc", store, prompts, save=False, gc_after=True)
    assert meta3["gc"]["returncode"] == 0, meta3["gc"]["stderr"]
    assert not sub.errors, sub.errors
    stored3, removed3 = set(), []
    for _, batch in sub.batches:
        for e in batch.events:
            if getattr(e, "medium", None) == medium:
                (removed3.extend if type(e).__name__ == "BlockRemoved" else stored3.update)(e.block_hashes)
    print(f"run 3 (load, then gc of every block): {len(stored3)} ucm blocks announced, {len(removed3)} announced "
          f"removed; gc removed {meta3['gc']['report'].get('evicted_blocks')}")
    assert stored3 and set(removed3) == stored3 and len(removed3) == len(stored3)


if __name__ == "__main__":
    runner(sys.argv[1:])
