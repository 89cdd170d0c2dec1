#!/usr/bin/env python3
"""One engine's prefill throughput on a token-ids corpus, for scripts/bench_prefill.sh.

    python bench_prefill_engines.py vllm   --model M --ids IDS.jsonl --dtype bfloat16|float32
    python bench_prefill_engines.py hf     --model M --ids IDS.jsonl --dtype bfloat16|float32
    python bench_prefill_engines.py matmul --dtype float32|bfloat16 [--params N]

Prints one JSON object on stdout. Prefill tokens/s = prompt tokens / wall seconds of the timed run
(after one untimed warm-up run of the same prompts).
  vllm: vLLM's CPU build (run in .venv-vllm), LLM.generate(prompt_token_ids, max_tokens=1),
        prefix caching off, all prompts in one call (vLLM batches them itself).
  hf:   Hugging Face transformers (run in .venv-torch): model(input_ids) under no_grad, prompts
        padded into batches of <= 4096 tokens, as `ucm bench precompute` packs them.
  matmul: the machine's matmul limit in the same run: GFLOP/s of a [4096 x 576] x [576 x 1536]
        torch.matmul (SmolLM2-135M's MLP shape) and, with --params, the prefill tokens/s it bounds
        (2 FLOPs per parameter per token).
"""
import argparse
import json
import os
import sys
import time


def load_ids(path):
    return [json.loads(l)["token_ids"] for l in open(path) if l.strip()]


def run_vllm(a):
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    ids = load_ids(a.ids)
    llm = LLM(model=a.model, dtype=a.dtype, max_model_len=2048, enforce_eager=True, enable_prefix_caching=False,
              seed=0)
    sp = SamplingParams(temperature=0.0, max_tokens=1)
    prompts = [TokensPrompt(prompt_token_ids=x) for x in ids]
    llm.generate(prompts, sp, use_tqdm=False)  # warm-up
    t0 = time.perf_counter()
    llm.generate(prompts, sp, use_tqdm=False)
    dt = time.perf_counter() - t0
    n = sum(len(x) for x in ids)
    import torch
    return {"engine": "vllm", "version": __import__("vllm").__version__, "dtype": a.dtype, "tokens": n,
            "seconds": dt, "tokens_per_second": n / dt, "threads": torch.get_num_threads()}


def run_hf(a):
    import torch
    from transformers import AutoModelForCausalLM
    dt_ = {"bfloat16": torch.bfloat16, "float32": torch.float32}[a.dtype]
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=dt_).eval()
    ids = sorted(load_ids(a.ids), key=len, reverse=True)
    batches, cur, T = [], [], 0
    for x in ids:
        if cur and (len(cur) + 1) * max(T, len(x)) > 4096:
            batches.append(cur)
            cur, T = [], 0
        cur.append(x)
        T = max(T, len(x))
    if cur:
        batches.append(cur)

    def once():
        for b in batches:
            T = max(len(x) for x in b)
            inp = torch.zeros((len(b), T), dtype=torch.long)
            mask = torch.zeros((len(b), T), dtype=torch.long)
            for i, x in enumerate(b):
                inp[i, :len(x)] = torch.tensor(x)
                mask[i, :len(x)] = 1
            with torch.no_grad():
                model(input_ids=inp, attention_mask=mask, use_cache=True, logits_to_keep=1)

    once()
    t0 = time.perf_counter()
    once()
    dt = time.perf_counter() - t0
    n = sum(len(x) for x in ids)
    import transformers
    return {"engine": "transformers", "version": transformers.__version__, "dtype": a.dtype, "tokens": n,
            "seconds": dt, "tokens_per_second": n / dt, "threads": torch.get_num_threads()}


def run_matmul(a):
    import torch
    dt_ = {"bfloat16": torch.bfloat16, "float32": torch.float32}[a.dtype]
    x = torch.randn(4096, 576, dtype=dt_)
    w = torch.randn(576, 1536, dtype=dt_)
    for _ in range(3):
        x @ w
    reps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 3.0:
        x @ w
        reps += 1
    dt = time.perf_counter() - t0
    gflops = 2 * 4096 * 576 * 1536 * reps / dt / 1e9
    out = {"engine": "matmul", "dtype": a.dtype, "gflops": gflops, "threads": torch.get_num_threads()}
    if a.params:
        out["tokens_per_second_bound"] = gflops * 1e9 / (2 * a.params)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("engine", choices=["vllm", "hf", "matmul"])
    ap.add_argument("--model")
    ap.add_argument("--ids")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--params", type=float, default=0)
    a = ap.parse_args()
    r = {"vllm": run_vllm, "hf": run_hf, "matmul": run_matmul}[a.engine](a)
    print(json.dumps(r))


if __name__ == "__main__":
    sys.exit(main())
