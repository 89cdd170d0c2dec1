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

from test_vllm import DOCS_DIR, MODEL, UCM_BIN, template_prefix
from test_vllm_load import (DOCS, PROMPTS, QUESTIONS, copy_store, corrupt, finish, precomputed, reference, run, start,
                            tmp, tokens, verify, wait_for)

__all__ = ["precomputed", "reference", "tmp"]  # module fixtures shared with test_vllm_load.py
# With prefix caching on, the two prompts of a document share its blocks, and a 32-block cache no
# longer preempts (measured: 0, and 0 at 20 blocks with admission on the first chunk once the
# connector serves the documents). Short documents and long answers do (below).
PREEMPT = ["--num-gpu-blocks", "20", "--max-num-batched-tokens", "2048", "--max-num-seqs", "16",
           "--max-model-len", "2048"]


def audit(store, namespace=None):
    """`ucm inspect --audit --all`: every block recomputed from its token ids and compared."""
    p = subprocess.run([UCM_BIN, "inspect", str(store), "--audit", "--all", "--model", str(MODEL), "--json"]
                       + (["--namespace", namespace] if namespace else []), capture_output=True, text=True)
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


def test_damaged_block_between_a_preemption_and_the_resume(tmp, precomputed):
    """Four documents cut to 1,500 characters (3 stored engine blocks each), 600 greedy tokens:
    four requests fit a 20-block cache at admission and outgrow it while decoding, so vLLM
    preempts; the others' new blocks evict the preempted request's freed ones, so when it resumes
    the connector loads them again. The worker pauses before the first load of a resuming request,
    the test damages the middle block of that load, and the server goes on (saving)."""
    prompts = [{"prompt": template_prefix() + (DOCS_DIR / d).read_text()[:1500] + QUESTIONS[0]} for d in DOCS[:4]]
    long = ["--max-tokens", "600"]
    ref, _, _ = run(tmp, "resume-ref", prompts=prompts, args=long)
    store = copy_store(precomputed, tmp / "dflt-resume-store")
    pause = tmp / "dflt-resume.go"
    proc, out = start(tmp, "dflt-resume", store, {"test_pause_before_load": str(pause), "test_pause_on": "resumed"},
                      args=PREEMPT + long, save=True, prompts=prompts)
    wait_for(str(pause) + ".waiting", proc, timeout=900)
    pending = [ld for ld in json.loads((tmp / "dflt-resume.go.waiting").read_text()) if ld["resumed"]]
    victim = pending[0]["hashes"][len(pending[0]["hashes"]) // 2]
    corrupt(store, victim)
    pause.write_text("go")
    res, err = finish(proc, out, "dflt-resume", tmp)
    meta = json.loads(out.read_text())
    print(f"resume: {meta['preemptions']} preemptions; damaged block {victim} of request {pending[0]['req']}")
    assert meta["preemptions"] and meta["preemptions"] > 0
    assert "UCM_E_CORRUPTION" in err and "reported to vLLM" in err, err[-3000:]
    no_errors(res)
    assert tokens(res) == tokens(ref)
    assert audit(store)["poisoned_total"] == 0
    fresh, _, _ = run(tmp, "dflt-resume-fresh", store=store, prompts=prompts, args=long)
    assert tokens(fresh) == tokens(ref)


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


def make_adapter(path, rank=8, seed=0):
    """A tiny random LoRA adapter for SmolLM2 (peft's file layout: adapter_config.json and
    adapter_model.safetensors with base_model.model.<module>.lora_A / lora_B weights) on q, k and
    v of every layer: it changes the KV, and the answers."""
    import torch
    from safetensors.torch import save_file
    cfg = json.loads((MODEL / "config.json").read_text())
    hid, heads, kv, layers = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], \
        cfg["num_hidden_layers"]
    hd = hid // heads
    g = torch.Generator().manual_seed(seed)
    w = {}
    for i in range(layers):
        for m, out in (("q_proj", heads * hd), ("k_proj", kv * hd), ("v_proj", kv * hd)):
            pre = f"base_model.model.model.layers.{i}.self_attn.{m}"
            w[pre + ".lora_A.weight"] = torch.randn(rank, hid, generator=g) * 0.05
            w[pre + ".lora_B.weight"] = torch.randn(out, rank, generator=g) * 0.05
    path.mkdir(parents=True, exist_ok=True)
    save_file(w, str(path / "adapter_model.safetensors"))
    (path / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank, "lora_alpha": 2 * rank, "lora_dropout": 0.0,
        "bias": "none", "fan_in_fan_out": False, "target_modules": ["q_proj", "k_proj", "v_proj"],
        "base_model_name_or_path": str(MODEL)}))
    return path


def test_a_lora_request_and_a_base_request_with_the_same_prompt(tmp):
    """A LoRA request saves into its adapter's namespace and hits it later; the base request with
    the same prompt never hits the adapter's blocks, nor the adapter request the base model's."""
    import ucm
    adapter = make_adapter(tmp / "adapter")
    p = PROMPTS[0]["prompt"]
    items = [{"prompt": p, "lora": True}, {"prompt": p}]
    lo = ["--lora", str(adapter)]
    ref, _, _ = run(tmp, "lora-ref", prompts=items, one_by_one=True, args=lo)
    assert tokens(ref)[0] != tokens(ref)[1], "the adapter does not change the answer"
    store = tmp / "lora-store"
    res, err, _ = run(tmp, "lora-save", store=store, save=True, prompts=items, one_by_one=True, args=lo)
    assert [r["num_cached_tokens"] for r in res] == [0, 0]
    assert tokens(res) == tokens(ref)
    with ucm.Store(str(store)) as s:
        nss = {d["name"]: d for d in s.namespaces()}
    assert len(nss) == 2 and sum(1 for d in nss.values() if "lora" in d.get("extra", {})) == 1, nss
    base = next(n for n, d in nss.items() if "lora" not in d.get("extra", {}))
    fresh, _, _ = run(tmp, "lora-fresh", store=store, prompts=items[::-1], one_by_one=True, args=lo)
    assert all(r["num_cached_tokens"] > 0 for r in fresh)
    assert tokens(fresh) == tokens(ref)[::-1]
    assert audit(store, base)["poisoned_total"] == 0        # no adapter KV in the base namespace
