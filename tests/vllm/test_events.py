"""`ucm events` against vLLM's own KV event classes (issue 38, point 4): a store precomputed by
`ucm precompute` from python3.11-doc pages (the server's token ids), published by `ucm events`,
received on a ZeroMQ SUB socket and through the replay socket as vLLM's subscriber example does,
and decoded with vLLM 0.32's own decoder (msgspec.msgpack.Decoder(type=KVEventBatch)). Then a
writer adds documents and `ucm gc` halves the store while it runs. Checks: every message decodes,
sequence numbers have no gap, the block hashes, parents and token ids equal what the store holds,
and a router-side index built only from the events' token ids (as llm-d's KV indexer does: its
own hash chain over block_size-token blocks, parents mapped through the engine's hashes) finds
every precomputed document's whole prefix, and none of the blocks gc removed.
Runs in .venv-vllm (scripts/test_vllm.sh); about a minute on 2 cores.
"""
import hashlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_vllm import DOCS_DIR, MODEL, ROOT, TEMPLATE, UCM_BIN

DOCS = ["library/gzip.rst.txt", "library/zlib.rst.txt", "library/difflib.rst.txt", "library/shelve.rst.txt",
        "library/bz2.rst.txt", "library/lzma.rst.txt"]
LATER = ["library/tarfile.rst.txt", "library/zipfile.rst.txt"]
CUT = 3000


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tokenize(tmp, name, docs):
    corpus = tmp / f"{name}.jsonl"
    corpus.write_text("".join(json.dumps({"id": d, "text": (DOCS_DIR / d).read_text()[:CUT]}) + "\n" for d in docs))
    ids = tmp / f"{name}.ids.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib/python")}
    subprocess.run([sys.executable, "-m", "ucm.tokenize", "--tokenizer", str(MODEL), "--template", str(TEMPLATE),
                    "--corpus", str(corpus), "--out", str(ids)], check=True, env=env)
    return [json.loads(l) for l in ids.read_text().splitlines()], ids


def precompute(ids_file, store):
    p = subprocess.run([UCM_BIN, "precompute", "--model", str(MODEL), "--corpus", str(ids_file), "--store", str(store),
                        "--dtype", "fp32"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr[-2000:]


class Subscriber:
    """vLLM's subscriber pattern (examples/online_serving/kv_events_subscriber.py of vLLM): a SUB
    socket for live batches, a DEALER on the replay socket asking for what it missed."""

    def __init__(self, endpoint, replay_endpoint, topic=""):
        import msgspec
        import zmq
        from vllm.distributed.kv_events import KVEventBatch
        self.zmq = zmq
        self.decoder = msgspec.msgpack.Decoder(type=KVEventBatch)
        self.encoder = msgspec.msgpack.Encoder()  # what vLLM's ZmqEventPublisher encodes with
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.connect(endpoint)
        self.sub.setsockopt_string(zmq.SUBSCRIBE, topic)
        self.replay = self.ctx.socket(zmq.DEALER)
        self.replay.connect(replay_endpoint)
        self.batches = {}  # seq -> KVEventBatch

    def _take(self, seq, payload):
        batch = self.decoder.decode(payload)  # raises on anything vLLM would not read
        # The bytes vLLM's own publisher writes for the same batch: [ts, events, data_parallel_rank],
        # each event a map in its class's field order.
        assert self.encoder.encode(batch) == payload, (batch, payload.hex())
        assert batch.data_parallel_rank == 0
        self.batches.setdefault(seq, batch)

    def ask_replay(self, start):
        self.replay.send_multipart([b"", start.to_bytes(8, "big")])
        while True:
            _, topic, seq, payload = self.replay.recv_multipart()
            seq = int.from_bytes(seq, "big", signed=True)
            if seq < 0:
                return
            self._take(seq, payload)

    def drain(self, seconds, replay=True):
        end = time.time() + seconds
        while time.time() < end:
            if self.sub.poll(100):
                topic, seq, payload = self.sub.recv_multipart()
                self._take(int.from_bytes(seq, "big"), payload)
        if self.batches and replay:  # a gap (the slow-joiner start, or a dropped message): replay it
            missing = [s for s in range(max(self.batches) + 1) if s not in self.batches]
            if missing:
                self.ask_replay(missing[0])

    def events(self):
        return [e for s in sorted(self.batches) for e in self.batches[s].events]


def router_index(events):
    """What a KV-aware router learns from the events alone: its own key per block, a SHA-256
    chain over (parent key, block token ids), parents resolved through the engine's hashes."""
    keys = {}       # engine hash -> router key
    index = set()   # router keys present
    for e in events:
        kind = type(e).__name__
        if kind == "AllBlocksCleared":
            keys.clear()
            index.clear()
        elif kind == "BlockStored":
            parent = b"" if e.parent_block_hash is None else keys.get(e.parent_block_hash)
            if parent is None:
                continue  # the parent was never announced: no prefix to extend
            for i, h in enumerate(e.block_hashes):
                ids = e.token_ids[i * e.block_size:(i + 1) * e.block_size]
                parent = hashlib.sha256(parent + struct.pack(f"<{len(ids)}I", *ids)).digest()
                keys[h] = parent
                index.add(parent)
        elif kind == "BlockRemoved":
            for h in e.block_hashes:
                index.discard(keys.pop(h, None))
    return index


def router_prefix_blocks(index, ids, block_size):
    key, n = b"", 0
    for b in range(len(ids) // block_size):
        key = hashlib.sha256(key + struct.pack(f"<{block_size}I", *ids[b * block_size:(b + 1) * block_size])).digest()
        if key not in index:
            break
        n += 1
    return n


def test_ucm_events_in_vllms_wire_format(tmp_path):
    if not MODEL.exists() or not all((DOCS_DIR / d).exists() for d in DOCS + LATER):
        pytest.skip("model or python3.11-doc documents missing")
    import ucm
    docs, ids_file = tokenize(tmp_path, "docs", DOCS)
    later, later_file = tokenize(tmp_path, "later", LATER)
    store = tmp_path / "corpus-store"
    precompute(ids_file, store)

    # As vLLM's publisher: an endpoint with '*' is bound (and one without is connected to a
    # subscriber that binds); the replay socket is always bound.
    port, rep = free_port(), f"tcp://127.0.0.1:{free_port()}"
    sub = Subscriber(f"tcp://127.0.0.1:{port}", rep)
    proc = subprocess.Popen([UCM_BIN, "events", str(store), "--endpoint", f"tcp://*:{port}", "--replay-endpoint", rep,
                             "--poll", "200ms", "--batch-blocks", "64", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        sub.drain(3.0)
        sub.ask_replay(0)  # a late subscriber's way to the snapshot
        snap = sub.events()
        assert type(snap[0]).__name__ == "AllBlocksCleared"
        stored = [e for e in snap if type(e).__name__ == "BlockStored"]
        medium = ucm.event_medium(str(store))
        assert medium == "ucm:corpus-store" and all(e.medium == medium for e in stored)
        # Blocks, not announcements: the subscription may also have had the snapshot sent again.
        n_snap = len({h for e in stored for h in e.block_hashes})

        # What the store holds, through the library.
        with ucm.Store(str(store)) as s:
            ns = s.namespace(s.namespaces()[0]["id"])
            bs = ns.block_size
            held = {h.tobytes() for d in docs for h in ucm.hash_blocks(ns.hash_seed, d["token_ids"], bs)}
            assert n_snap == len(held)
            for e in stored:
                assert e.block_size == bs and len(e.token_ids) == len(e.block_hashes) * bs
                assert all(isinstance(h, bytes) and len(h) == 16 for h in e.block_hashes)
                assert e.lora_id is None and e.lora_name is None
                for i, h in enumerate(e.block_hashes):
                    assert h in held
                    chain = s.tokens(ns, h)  # the chain's ids from the store: this block's are the last bs
                    assert list(chain[-bs:]) == e.token_ids[i * bs:(i + 1) * bs]
                    parent = e.block_hashes[i - 1] if i else e.parent_block_hash
                    want = bytes(ucm.hash_blocks(ns.hash_seed, chain, bs)[-2]) if len(chain) > bs else None
                    assert parent == want
        index = router_index(snap)
        for d in docs:
            assert router_prefix_blocks(index, d["token_ids"], bs) == len(d["token_ids"]) // bs, d["id"]

        # A router that starts later, with llm-d's filter and without asking for a replay: its
        # subscription (XPUB) makes ucm send the store's blocks again.
        late = Subscriber(f"tcp://127.0.0.1:{port}", rep, topic="")
        late.drain(7.0, replay=False)  # --resend-interval: 5 s after the first subscriber's
        late_index = router_index(late.events())
        for d in docs:
            assert router_prefix_blocks(late_index, d["token_ids"], bs) == len(d["token_ids"]) // bs, d["id"]

        # Live: a writer adds two documents, then gc halves the store.
        precompute(later_file, store)
        sub.drain(3.0)
        before = len(sub.events())
        info = json.loads(subprocess.run([UCM_BIN, "inspect", str(store), "--json"], capture_output=True,
                                         text=True, check=True).stdout)
        half = int(info["bytes"]) // 2
        g = subprocess.run([UCM_BIN, "gc", str(store), "--max-bytes", str(half), "--grace", "0", "--json"],
                           capture_output=True, text=True)
        assert g.returncode == 0, g.stderr
        sub.drain(3.0)
        evs = sub.events()
        assert sorted(sub.batches) == list(range(len(sub.batches)))  # every sequence number, no gap
        added = [h for e in evs[len(snap):] if type(e).__name__ == "BlockStored" for h in e.block_hashes]
        assert len(evs) > before
        removed = [h for e in evs if type(e).__name__ == "BlockRemoved" for h in e.block_hashes]
        assert removed and all(e.medium == medium for e in evs if type(e).__name__ == "BlockRemoved")
        with ucm.Store(str(store)) as s:
            ns = s.namespace(s.namespaces()[0]["id"])
            later_hashes = {h.tobytes() for d in later for h in ucm.hash_blocks(ns.hash_seed, d["token_ids"], bs)}
            assert later_hashes - held <= set(added) and later_hashes - held  # the shared template prefix was there
            present = s.lookup(ns, [bytes(h) for h in removed]).present
            assert not any(present), "a block published as removed is still stored"
        index = router_index(evs)
        for d in docs + later:
            with ucm.Store(str(store)) as s:
                hs = ucm.hash_blocks(ns.hash_seed, d["token_ids"], bs)
                stored_prefix = s.lookup(ns, hs).prefix_blocks
            assert router_prefix_blocks(index, d["token_ids"], bs) == stored_prefix, d["id"]
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    report = json.loads(out)
    assert report["snapshot_blocks"] == n_snap and report["blocks_removed"] == len(removed)
    assert report["subscriptions"] >= 2 and report["resends"] >= 1
    print(f"\nucm events: snapshot {n_snap} blocks; live +{len(added)} / -{len(removed)}; "
          f"{report['batches']} batches, {report['replay_requests']} replay requests; report {report}")
