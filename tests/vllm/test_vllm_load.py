"""The UcmConnector under load (issue 37): a full KV cache that makes vLLM preempt, chunked prefill,
load failures, blocks removed by gc between lookup and load, a store that fails mid-run, two
saving servers on one store. fp32, SmolLM2-135M-Instruct, 8 python3.11-doc pages cut at 5,000
characters, two questions each: 16 prompts of 1.2-1.4K tokens in one generate() call, greedy, 96
tokens each with ignore_eos, prefix caching off. Every output must equal vLLM's own without the
connector, in a roomy cache. Run by scripts/test_vllm.sh (not in CI: a 6 GB venv, many vLLM
start-ups; about 20-30 minutes on 2 cores).
"""
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_vllm import DOCS_DIR, MODEL, ROOT, SETTING, SETTINGS, TEMPLATE, UCM_BIN, docs_tmp, template_prefix, vllm

DOCS = ["library/gzip.rst.txt", "library/zlib.rst.txt", "library/difflib.rst.txt", "library/shelve.rst.txt",
        "library/bz2.rst.txt", "library/lzma.rst.txt", "library/tarfile.rst.txt", "library/zipfile.rst.txt"]
CUT = 5000
QUESTIONS = ["\nQuestion: what is this module for?\nAnswer:", "\nQuestion: name one function it provides.\nAnswer:"]
TOKENS = 160
# A cache of 32 blocks of 128 tokens holds two or three of these requests: vLLM preempts. With
# prefix caching on (vLLM's default) the two prompts of a document share its blocks and 32 blocks
# never preempt (measured: 0); 28 do (4 preemptions, one resumed request loaded again).
FULL = ["--num-gpu-blocks", "28" if SETTING == "defaults" else "32", "--max-num-batched-tokens", "2048",
        "--max-num-seqs", "16", "--max-model-len", "2048"]
# Loads without preemption: one per prompt, or under prefix caching one per document (the second
# prompt of a document takes the first's blocks from vLLM's prefix cache).
FIRST_LOADS = len(DOCS) if SETTING == "defaults" else len(DOCS) * len(QUESTIONS)


def run(tmp, name, store=None, save=False, extra=None, args=(), prompts=None, one_by_one=False):
    a = list(args) + (["--extra", json.dumps(extra)] if extra else []) + (["--one-by-one"] if one_by_one else [])
    res, err = vllm(tmp, name, prompts or PROMPTS, store=store, save=save, dtype="float32", max_tokens=TOKENS,
                    extra=a)
    meta = json.loads((tmp / f"{name}.out.json").read_text())
    return res, err, meta


def tokens(res):
    return [r["tokens"] for r in res]


def events(stats_file):
    p = Path(stats_file)
    return [json.loads(l) for l in p.read_text().splitlines()] if p.exists() else []


PROMPTS = [{"prompt": template_prefix() + (DOCS_DIR / d).read_text()[:CUT] + q} for d in DOCS for q in QUESTIONS] \
    if DOCS_DIR.exists() else []


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return docs_tmp(tmp_path_factory, DOCS, "vllm-load")


@pytest.fixture(scope="module")
def reference(tmp):
    """vLLM without the connector, a roomy cache: the answer every run must give."""
    res, _, meta = run(tmp, "ref")
    return tokens(res)


@pytest.fixture(scope="module")
def precomputed(tmp):
    """The 8 documents precomputed by `ucm precompute --dtype fp32` from the server's token ids."""
    corpus = tmp / "docs.jsonl"
    corpus.write_text("".join(json.dumps({"id": d, "text": (DOCS_DIR / d).read_text()[:CUT]}) + "\n" for d in DOCS))
    ids = tmp / "ids.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib/python")}
    subprocess.run([sys.executable, "-m", "ucm.tokenize", "--tokenizer", str(MODEL), "--template", str(TEMPLATE),
                    "--corpus", str(corpus), "--out", str(ids)], check=True, env=env)
    store = tmp / "pre-store"
    subprocess.run([UCM_BIN, "precompute", "--model", str(MODEL), "--corpus", str(ids), "--store", str(store),
                    "--dtype", "fp32"], check=True, capture_output=True)
    return store


def copy_store(src, dst):
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("LOCK", "readers", "access"))
    return dst


def verify(store):
    v = subprocess.run([UCM_BIN, "inspect", str(store), "--verify", "--json"], capture_output=True, text=True)
    assert v.returncode == 0, v.stdout[-2000:] + v.stderr[-2000:]
    return json.loads(v.stdout)


def test_preemption_with_load_and_save_then_a_fresh_server(tmp, reference, precomputed, monkeypatch):
    store = copy_store(precomputed, tmp / "preempt-store")
    stats = tmp / "preempt.stats.jsonl"
    monkeypatch.setenv("UCM_VLLM_STATS", str(stats))
    res, err, meta = run(tmp, "preempt", store=store, save=True, args=FULL)
    loads = [e for e in events(stats) if e["event"] == "load"]
    print(f"preemption: vLLM preempted {meta['preemptions']} times; {len(loads)} loads for {len(PROMPTS)} requests; "
          f"cached tokens {[r['num_cached_tokens'] for r in res]}")
    assert meta["preemptions"] and meta["preemptions"] > 0, "the cache did not force preemption"
    assert len(loads) > FIRST_LOADS, "a resumed request was not loaded again"
    assert tokens(res) == reference
    verify(store)
    monkeypatch.delenv("UCM_VLLM_STATS")
    fresh, _, _ = run(tmp, "preempt-fresh", store=store)
    assert tokens(fresh) == reference
    assert all(r["num_cached_tokens"] > 0 for r in fresh)


def test_a_preempting_server_saving_into_an_empty_store_writes_only_computed_kv(tmp, reference):
    """The store poisoning of issue 37 (there num_gpu_blocks_override=36; here 24): the saver's own outputs and a
    fresh server's outputs from what it saved both equal the reference."""
    store = tmp / "poison-store"
    res, err, meta = run(tmp, "poison-save", store=store, save=True,
                         args=["--num-gpu-blocks", "24", "--max-num-batched-tokens", "2048", "--max-num-seqs", "16",
                               "--max-model-len", "2048"])
    assert meta["preemptions"] and meta["preemptions"] > 0
    assert tokens(res) == reference
    info = verify(store)
    fresh, _, _ = run(tmp, "poison-fresh", store=store)
    print(f"poison: {meta['preemptions']} preemptions while saving; fresh server cached "
          f"{[r['num_cached_tokens'] for r in fresh]}; store {info.get('blocks', info.get('totals'))}")
    assert sum(r["num_cached_tokens"] for r in fresh) > 0
    assert tokens(fresh) == reference


def corrupt(store, hash_hex):
    """Flips one payload byte of block hash_hex, every copy of it (a block saved by a server lives
    in its writer shard, store_v1.md §11: inspect names the shard)."""
    found = json.loads(subprocess.run([UCM_BIN, "inspect", str(store), "--block", hash_hex, "--json"],
                                      capture_output=True, text=True, check=True).stdout)["block"]
    for blk in (found if isinstance(found, list) else [found]):
        rec = blk["kv"]
        root = Path(store) / "shards" / blk["shard"] if "shard" in blk else Path(store)
        data = root / "data" / f"{rec['file']:08d}.ucmd"
        b = bytearray(data.read_bytes())
        b[rec["offset"] + rec["length"] // 2] ^= 0xFF
        data.write_bytes(bytes(b))


# Two prompts whose question is long enough that full blocks past the stored document are missing
# from the store: the step that loads the hit and computes the rest also plans their save.
LONG_Q = ("\nQuestion: explain in detail what this module is for, which functions and classes it provides, "
          "which exceptions they raise, and give one short example of its use for each of them.\nAnswer:")
FAULT_PROMPTS = [{"prompt": template_prefix() + (DOCS_DIR / d).read_text()[:CUT] + LONG_Q} for d in DOCS[:2]] \
    if DOCS_DIR.exists() else []


def test_load_failure_in_a_one_step_prefill_saves_nothing_wrong(tmp, precomputed):
    """A corrupt block in the middle of a prompt's hit; the prefill is one step (the budget holds
    the prompt), so the save planned for that step would cover KV computed over the failed block:
    the worker drops it, vLLM recomputes, the save comes after. A fresh server reading the store
    then gives the reference output."""
    ref, _, _ = run(tmp, "fault-ref", prompts=FAULT_PROMPTS)
    store = copy_store(precomputed, tmp / "fault-store")
    import ucm
    from transformers import AutoTokenizer
    ids = AutoTokenizer.from_pretrained(str(MODEL))(FAULT_PROMPTS[0]["prompt"])["input_ids"]
    with ucm.Store(str(store)) as s:
        ns = s.namespace(s.namespaces()[0]["id"])
        hashes = ucm.hash_blocks(ns.hash_seed, ids, ns.block_size)
        assert not s.lookup(ns, hashes).present[-1], "the prompt's last full block must be missing"
    corrupt(store, hashes[20].tobytes().hex())
    res, err, _ = run(tmp, "fault-save", store=store, save=True, one_by_one=True, prompts=FAULT_PROMPTS)
    assert "failed to load" in err and "UCM_E_CORRUPTION" in err, err[-3000:]
    assert "do not hold good KV" in err and "reported to vLLM" in err, err[-3000:]
    assert tokens(res) == tokens(ref)
    fresh, _, _ = run(tmp, "fault-fresh", store=store, prompts=FAULT_PROMPTS)
    assert tokens(fresh) == tokens(ref)


def start(tmp, name, store, extra, args=(), save=False, prompts=None):
    """vllm_run.py in the background (fp32, TOKENS tokens); returns (process, output file)."""
    pfile, out = tmp / f"{name}.prompts.json", tmp / f"{name}.out.json"
    pfile.write_text(json.dumps(prompts or PROMPTS))
    cmd = [sys.executable, str(ROOT / "tests/vllm/vllm_run.py"), "--model", str(MODEL), "--prompts", str(pfile),
           "--out", str(out), "--dtype", "float32", "--max-tokens", str(TOKENS), "--store", str(store),
           "--extra", json.dumps(extra), *SETTINGS[SETTING], *args] + (["--save"] if save else [])
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib/python"), "UCM_BIN": UCM_BIN, "VLLM_CPU_KVCACHE_SPACE": "1",
           "UCM_LIB": str(ROOT / "build/lib/libucm.so")}
    errf = open(tmp / f"{name}.stderr.txt", "w")
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=errf, env=env), out


def wait_for(path, proc, timeout=600):
    t0 = time.time()
    while not Path(path).exists():
        assert proc.poll() is None, f"the server exited ({proc.returncode}) before {path}"
        assert time.time() - t0 < timeout, f"no {path} after {timeout} s"
        time.sleep(0.2)


def finish(proc, out, name, tmp):
    assert proc.wait(timeout=900) == 0, (tmp / f"{name}.stderr.txt").read_text()[-4000:]
    return json.loads(Path(out).read_text())["results"], (tmp / f"{name}.stderr.txt").read_text()


def test_blocks_removed_by_gc_between_lookup_and_load_are_recomputed(tmp, reference, precomputed):
    store = copy_store(precomputed, tmp / "gc-race-store")
    pause = tmp / "gc-race.go"
    proc, out = start(tmp, "gc-race", store, {"test_pause_before_load": str(pause)})
    wait_for(str(pause) + ".waiting", proc)         # the scheduler has looked up; the worker waits
    g = subprocess.run([UCM_BIN, "gc", str(store), "--max-bytes", "0", "--grace", "0", "--json"],
                       capture_output=True, text=True)
    assert g.returncode == 0, g.stderr
    time.sleep(0.5)                                  # the readers' refresh interval (200 ms)
    pause.write_text("go")
    res, err = finish(proc, out, "gc-race", tmp)
    assert tokens(res) == reference
    assert "failed to load" in err, err[-3000:]


def test_a_store_that_fails_mid_run_is_a_miss_and_the_server_keeps_serving(tmp, reference, precomputed):
    store = copy_store(precomputed, tmp / "away-store")
    pause = tmp / "away.go"
    proc, out = start(tmp, "away", store, {"test_pause_before_load": str(pause)})
    wait_for(str(pause) + ".waiting", proc)
    away = store.with_name("away-store.moved")
    store.rename(away)                              # the file system went away under the server
    pause.write_text("go")
    res, err = finish(proc, out, "away", tmp)
    assert tokens(res) == reference
    assert "failed to load" in err, err[-3000:]


def test_two_servers_save_to_one_store_then_a_third_loads(tmp, reference):
    store = tmp / "two-store"
    half = len(PROMPTS) // 2
    procs = [(*start(tmp, f"two-{k}", store, {}, save=True, prompts=part), f"two-{k}")
             for k, part in enumerate((PROMPTS[:half], PROMPTS[half:]))]
    got = []
    for proc, out, name in procs:
        res, err = finish(proc, out, name, tmp)
        got += tokens(res)
    assert got == reference
    info = verify(store)
    shards = [s for s in (store / "shards").iterdir() if not s.name.startswith(".")]
    print(f"two servers: shards {[s.name for s in shards]}")
    # one writer shard per server (and the shards where each registered the namespace: -ns)
    assert len([s for s in shards if not s.name.endswith("-ns")]) == 2
    fresh, _, _ = run(tmp, "two-fresh", store=store)
    assert tokens(fresh) == reference
    assert all(r["num_cached_tokens"] > 0 for r in fresh)


def test_gc_from_cron_beside_a_live_saving_server(tmp, reference):
    """`ucm gc --max-bytes` while a server saves to the store: the server's writer handle applies
    the removals (store_v1.md §11.5), gc exits 0, the server's outputs are exact, the store verifies,
    and a fresh server reading what survived is exact too."""
    store = tmp / "gc-live-store"
    proc, out = start(tmp, "gc-live", store, {}, args=FULL, save=True)
    t0 = time.time()
    while True:                                      # wait until the server has saved something
        assert proc.poll() is None, (tmp / "gc-live.stderr.txt").read_text()[-3000:]
        assert time.time() - t0 < 600
        p = subprocess.run([UCM_BIN, "inspect", str(store), "--json"], capture_output=True, text=True)
        if p.returncode == 0 and json.loads(p.stdout).get("blocks", 0) > 200:
            break
        time.sleep(2)
    reports = []
    while proc.poll() is None:
        g = subprocess.run([UCM_BIN, "gc", str(store), "--max-bytes", "20MiB", "--grace", "0", "--json"],
                           capture_output=True, text=True)
        assert g.returncode == 0, g.stdout[-2000:] + g.stderr[-2000:]
        reports.append(json.loads(g.stdout))
        time.sleep(3)
    res, err = finish(proc, out, "gc-live", tmp)
    handed = [r for r in reports if r.get("live_writer") or r.get("shards_handed_off")]
    print(f"gc beside a live server: {len(reports)} gc runs, {len(handed)} handed to the live writer")
    assert handed, json.dumps(reports[-1])[:3000]
    assert tokens(res) == reference
    verify(store)
    fresh, _, _ = run(tmp, "gc-live-fresh", store=store)
    assert tokens(fresh) == reference


def test_tensor_parallel_3_saves_whole_blocks_and_tp_1_and_3_load_them(tmp):
    """TP 3 on vLLM's CPU build (SmolLM2: 9 query heads, 3 KV heads, so TP 2 is refused by vLLM;
    3 ranks on 2 cores with VLLM_CPU_OMP_THREADS_BIND=0|1|0): every rank copies its KV head out,
    TP rank 0 gathers and writes whole blocks. A TP 1 and a TP 3 server then load them: outputs
    equal their own no-connector outputs."""
    prompts = PROMPTS[:4:2]
    bind = {"VLLM_CPU_OMP_THREADS_BIND": "0|1|0"}
    old = {k: os.environ.get(k) for k in bind}
    os.environ.update(bind)
    try:
        tp3 = ["--tp", "3", "--max-model-len", "4096"]
        base3, _, _ = run(tmp, "tp3-base", prompts=prompts, args=tp3)
        store = tmp / "tp3-store"
        saved, err, _ = run(tmp, "tp3-save", store=store, save=True, prompts=prompts, args=tp3)
        assert tokens(saved) == tokens(base3)
        assert verify(store).get("blocks", 0) > 0           # whole blocks, every KV head
        load3, _, _ = run(tmp, "tp3-load", store=store, prompts=prompts, args=tp3)
        assert tokens(load3) == tokens(base3) and all(r["num_cached_tokens"] > 0 for r in load3)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    base1, _, _ = run(tmp, "tp1-base", prompts=prompts, args=["--max-model-len", "4096"])
    load1, _, _ = run(tmp, "tp1-load", store=store, prompts=prompts, args=["--max-model-len", "4096"])
    assert tokens(load1) == tokens(base1) and all(r["num_cached_tokens"] > 0 for r in load1)
