"""The UcmConnector under vLLM's own defaults (issue 56): prefix caching on, kv_load_failure_policy
unset, a store with damaged blocks. fp32, SmolLM2-135M-Instruct, the 8 documents and 16 prompts of
test_vllm_load.py (two questions per document, the two prompts of a document side by side in one
generate() call, so that the second takes the first's blocks from vLLM's prefix cache in the same
step). Damage: 3 blocks of each document's stored chain, one byte each (24 blocks), what a bad
disk or a torn copy does. Every output must equal vLLM's own without the connector, no request may
fail, and after every run that saves `ucm inspect --audit --all` must find 0 poisoned blocks.
Run by scripts/test_vllm.sh (not in CI).
"""
import json
import subprocess

import pytest

from test_vllm import MODEL, UCM_BIN
from test_vllm_load import (DOCS, FULL, PROMPTS, copy_store, corrupt, finish, precomputed, reference, run, start,
                            tmp, tokens, verify, wait_for)

__all__ = ["precomputed", "reference", "tmp"]  # module fixtures shared with test_vllm_load.py


def audit(store):
    """`ucm inspect --audit --all`: every block recomputed from its token ids and compared."""
    p = subprocess.run([UCM_BIN, "inspect", str(store), "--audit", "--all", "--model", str(MODEL), "--json"],
                       capture_output=True, text=True)
    assert p.returncode in (0, 3), p.stderr[-3000:]
    rep = json.loads(p.stdout)
    print(f"audit {store.name}: {rep['audited']} blocks, {rep['poisoned_total']} poisoned")
    return rep


def damage(store, per_doc=3):
    """Corrupts per_doc blocks of each document's stored chain (at 1/4, 1/2, 3/4 of it); returns
    their hashes."""
    import ucm
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(MODEL))
    hit = []
    with ucm.Store(str(store)) as s:
        ns = s.namespace(s.namespaces()[0]["id"])
        for p in PROMPTS[::2]:
            h = ucm.hash_blocks(ns.hash_seed, tok(p["prompt"])["input_ids"], ns.block_size)
            n = int(s.lookup(ns, h).prefix_blocks)
            hit += [h[n * k // (per_doc + 1)].tobytes().hex() for k in range(1, per_doc + 1)]
    for hx in hit:
        corrupt(store, hx)
    return hit


def no_errors(res):
    assert [r["finish_reason"] for r in res if r["finish_reason"] not in ("length", "stop")] == []


def test_damaged_shared_blocks_load_only(tmp, reference, precomputed):
    store = copy_store(precomputed, tmp / "dflt-load-store")
    bad = damage(store)
    assert verify_count(store) == len(bad)
    res, err, _ = run(tmp, "dflt-load", store=store)
    no_errors(res)
    assert tokens(res) == reference
    assert "set to 'recompute'" in err and "reported to vLLM" in err, err[-3000:]
    print(f"load only, {len(bad)} damaged blocks: cached tokens {[r['num_cached_tokens'] for r in res]}")


def verify_count(store):
    v = subprocess.run([UCM_BIN, "inspect", str(store), "--verify", "--json"], capture_output=True, text=True)
    return json.loads(v.stdout)["corrupt_total"]


def test_damaged_shared_blocks_load_and_save_then_a_fresh_server(tmp, reference, precomputed):
    store = copy_store(precomputed, tmp / "dflt-save-store")
    damage(store)
    res, err, _ = run(tmp, "dflt-save", store=store, save=True)
    no_errors(res)
    assert tokens(res) == reference
    assert audit(store)["poisoned_total"] == 0
    fresh, _, _ = run(tmp, "dflt-save-fresh", store=store)
    no_errors(fresh)
    assert tokens(fresh) == reference
    assert sum(r["num_cached_tokens"] for r in fresh) > 0


def test_damaged_block_between_a_preemption_and_the_resume(tmp, reference, precomputed):
    """A 32-block cache preempts; the worker pauses before the first load of a resuming request,
    the test damages 24 blocks, the server goes on (loading and saving)."""
    store = copy_store(precomputed, tmp / "dflt-resume-store")
    pause = tmp / "dflt-resume.go"
    proc, out = start(tmp, "dflt-resume", store, {"test_pause_before_load": str(pause), "test_pause_on": "resumed"},
                      args=FULL, save=True)
    wait_for(str(pause) + ".waiting", proc, timeout=900)
    damage(store)
    pause.write_text("go")
    res, err = finish(proc, out, "dflt-resume", tmp)
    meta = json.loads(out.read_text())
    print(f"resume: {meta['preemptions']} preemptions")
    assert meta["preemptions"] and meta["preemptions"] > 0
    no_errors(res)
    assert tokens(res) == reference
    assert audit(store)["poisoned_total"] == 0
    fresh, _, _ = run(tmp, "dflt-resume-fresh", store=store)
    assert tokens(fresh) == reference


def test_a_salted_and_an_unsalted_request_never_share_blocks(tmp, reference):
    """cache_salt isolates tenants in vLLM's prefix cache; the store must not undo that: a salted
    request neither saves nor hits, an unsalted one hits only blocks saved for no salt."""
    store = tmp / "salt-store"
    p = PROMPTS[0]["prompt"]
    both = [{"prompt": p, "cache_salt": "tenant-a"}, {"prompt": p}]
    res, err, _ = run(tmp, "salt-save", store=store, save=True, prompts=both, one_by_one=True)
    assert [r["num_cached_tokens"] for r in res] == [0, 0]      # the salted request left nothing to hit
    assert "'bypassed_cache_salt': 1" in err, err[-2000:]
    again = [{"prompt": p, "cache_salt": "tenant-a"}, {"prompt": p, "cache_salt": "tenant-b"}, {"prompt": p}]
    res2, _, _ = run(tmp, "salt-load", store=store, prompts=again, one_by_one=True)
    assert [r["num_cached_tokens"] for r in res2][:2] == [0, 0]
    assert res2[2]["num_cached_tokens"] > 0
    assert tokens(res2) == [reference[0]] * 3 and tokens(res) == [reference[0]] * 2
    assert audit(store)["poisoned_total"] == 0
