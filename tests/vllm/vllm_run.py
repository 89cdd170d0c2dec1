#!/usr/bin/env python3
"""One vLLM process for tests/vllm/test_vllm.py and scripts/bench_vllm.py (run in .venv-vllm).

  --prompts FILE   JSON list of {"prompt": text} or {"ids": [...]} (and "cont": [...] for --score),
                   each with an optional "cache_salt", and "lora": true to use --lora
  --store S        serve through ucm.vllm.connector.UcmConnector on store S (absent: no connector)
  --save / --no-load  the connector's save / load settings
  --dtype          bfloat16 (default) or float32
  --score          teacher forcing: each prompt is ids + cont; report the top-K (--topk, default 100)
                   log-probabilities at each cont position; prefix cache reads stay on, so the
                   connector still serves
  --max-tokens N   greedy tokens to generate (default 16)
  --num-gpu-blocks N, --max-num-batched-tokens N, --max-num-seqs N
                   vLLM's KV cache size (blocks) and batch limits: a small cache forces preemption,
                   a small token budget chunked prefill
  --prefix-caching {default,on,off}, --failure-policy {default,recompute,fail}
                   vLLM's defaults unless given (prefix caching on, kv_load_failure_policy unset)
  --extra JSON     more kv_connector_extra_config keys
  --out FILE       JSON: per prompt {"tokens", "num_cached_tokens", "prompt_len", "seconds",
                   "cont_logprobs"}; "startup_seconds"; "preemptions" (vLLM's own counter,
                   vllm:num_preemptions)
"""
import argparse
import json
import os
import sys
import time

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--store")
    ap.add_argument("--namespace")
    ap.add_argument("--save", action="store_true")
    ap.add_argument("--no-load", action="store_true")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--score", action="store_true")
    ap.add_argument("--topk", type=int, default=100)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--prefix-caching", choices=["default", "on", "off"], default="default",
                    help="vLLM's enable_prefix_caching: its own default (on), or forced")
    ap.add_argument("--failure-policy", choices=["default", "recompute", "fail"], default="default",
                    help="kv_load_failure_policy: vLLM's own default (unset: \"fail\"), or set")
    ap.add_argument("--one-by-one", action="store_true", help="one generate() call per prompt (TTFT)")
    ap.add_argument("--num-gpu-blocks", type=int)
    ap.add_argument("--max-num-batched-tokens", type=int)
    ap.add_argument("--max-num-seqs", type=int)
    ap.add_argument("--over-admit", action="store_true",
                    help="scheduler_reserve_full_isl=False: admit a request on its first chunk's blocks, so "
                         "that requests outgrow a small cache part-way through their prefill and vLLM preempts")
    ap.add_argument("--lora", help="a LoRA adapter directory: prompts with \"lora\": true use it")
    ap.add_argument("--extra", default="{}")
    ap.add_argument("--max-model-len", type=int, default=8192)
    ap.add_argument("--tp", type=int, default=1, help="tensor_parallel_size")
    a = ap.parse_args()
    from vllm import LLM, SamplingParams
    from vllm.config import KVTransferConfig
    from vllm.inputs import TokensPrompt

    kw = {}
    if a.store:
        extra = {"store": a.store, "save": a.save, "load": not a.no_load}
        if a.namespace:
            extra["namespace"] = a.namespace
        extra.update(json.loads(a.extra))
        kw["kv_transfer_config"] = KVTransferConfig(
            kv_connector="UcmConnector", kv_connector_module_path="ucm.vllm.connector", kv_role="kv_both",
            kv_connector_extra_config=extra,
            **({} if a.failure_policy == "default" else {"kv_load_failure_policy": a.failure_policy}))
    lora_req = None
    if a.lora:
        from vllm.lora.request import LoRARequest
        kw.update(enable_lora=True, max_lora_rank=8, max_loras=1)
        lora_req = LoRARequest("test-adapter", 1, a.lora)
    if a.over_admit:
        kw["scheduler_reserve_full_isl"] = False
    if a.prefix_caching != "default":
        kw["enable_prefix_caching"] = a.prefix_caching == "on"
    t0 = time.time()
    if a.score:
        kw["max_logprobs"] = a.topk
    for k in ("num_gpu_blocks", "max_num_batched_tokens", "max_num_seqs"):
        if getattr(a, k):
            kw[k + ("_override" if k == "num_gpu_blocks" else "")] = getattr(a, k)
    llm = LLM(model=a.model, dtype=a.dtype, max_model_len=a.max_model_len, enforce_eager=True,
              seed=0, disable_log_stats=False,
              tensor_parallel_size=a.tp, **kw)
    startup = time.time() - t0
    items = json.load(open(a.prompts))
    prompts = []
    for it in items:
        salt = {"cache_salt": it["cache_salt"]} if it.get("cache_salt") else {}
        if "ids" in it:
            ids = list(it["ids"]) + (list(it.get("cont", [])) if a.score else [])
            prompts.append(TokensPrompt(prompt_token_ids=ids, **salt))
        else:
            prompts.append({"prompt": it["prompt"], **salt} if salt else it["prompt"])
    if a.score:
        # The top-K next-token log-probabilities at every prompt position (prompt_logprob_token_ids
        # would give full rows but needs vLLM's V2 model runner, absent on CPU). Reading from the
        # prefix cache / connector stays on; rows of cached positions are never used (vLLM leaves
        # them unset), and detokenize=False keeps vLLM from decoding them.
        sp = [SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=a.topk, skip_reading_prefix_cache=False,
                             detokenize=False) for _ in items]
    else:
        sp = SamplingParams(temperature=0.0, max_tokens=a.max_tokens, ignore_eos=True)
    res = []
    scores = {}
    batches = [[i] for i in range(len(prompts))] if a.one_by_one else [list(range(len(prompts)))]
    for batch in batches:
        t1 = time.time()
        lora = [lora_req if items[i].get("lora") else None for i in batch] if a.lora else None
        outs = llm.generate([prompts[i] for i in batch], [sp[i] for i in batch] if a.score else sp, use_tqdm=False,
                            lora_request=lora)
        dt = time.time() - t1
        for o in outs:
            r = {"tokens": list(o.outputs[0].token_ids), "num_cached_tokens": o.num_cached_tokens or 0,
                 "finish_reason": o.outputs[0].finish_reason,
                 "prompt_len": len(o.prompt_token_ids), "seconds": dt}
            if a.score:  # row j: the top-K ids that could be cont[j], and their log-probabilities
                it = items[len(res)]
                start = len(it["ids"])
                r["cont_logprobs"] = [{str(t): v.logprob for t, v in o.prompt_logprobs[start + j].items()}
                                      for j in range(len(it["cont"]))]
            res.append(r)
    preemptions = None
    ucm_metrics = []  # the connector's series on vLLM's Prometheus registry (ucm/vllm/metrics.py)
    try:
        for m in llm.get_metrics():
            if m.name == "vllm:num_preemptions":
                preemptions = int(getattr(m, "value", 0) or 0) + (preemptions or 0)
    except Exception as e:  # pragma: no cover
        print(f"vllm_run: metrics: {e}", file=sys.stderr)
    # What vLLM's /metrics serves is its process's prometheus_client registry (LLM.get_metrics()
    # reads only the vllm: series of it).
    from prometheus_client import REGISTRY
    for fam in REGISTRY.collect():
        if fam.name.startswith("ucm_"):
            for smp in fam.samples:
                if smp.name.endswith("_total") or fam.type == "gauge":
                    ucm_metrics.append({"name": fam.name, "labels": dict(smp.labels), "value": smp.value})
    with open(a.out, "w") as f:
        json.dump({"startup_seconds": startup, "results": res, "preemptions": preemptions,
                   "ucm_metrics": ucm_metrics}, f)
    if scores:
        import numpy as np
        np.savez(a.out + ".npz", **scores)
    shutdown_and_exit(llm, "vllm_run")


def shutdown_and_exit(llm, who):
    """Shuts the engine down (the connector's worker finishes its queued dumps), then leaves without
    the interpreter's teardown, where vLLM 0.32 on CPU sometimes aborts ("terminate called without
    an active exception") after all work is done. `who` prefixes the message of a failed shutdown."""
    try:
        llm.llm_engine.engine_core.shutdown()
    except Exception as e:  # pragma: no cover
        print(f"{who}: engine shutdown: {e}", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
