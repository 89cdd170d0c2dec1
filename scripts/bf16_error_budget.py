#!/usr/bin/env python3
"""Where a bf16 prefill's K/V leave the fp32 model's: the error of each bf16 rounding on its own.

    .venv-torch/bin/python scripts/bf16_error_budget.py [--model DIR] [--tokens 512]

A development-time measurement for issue 26's parity bar ("stored K/V within one bf16 step of the
fp32 path's on every layer of 5 real documents"), with Hugging Face transformers (eager attention,
fp32, one thread) as the engine, so it is independent of ucm's runner. Each variant is the fp32
model with some roundings to bf16 added; every one is compared with the plain fp32 model:

  W        the weights rounded to bf16 (what any engine holding bf16 weights starts from), the
           arithmetic fp32
  WI       W, and every matmul's input rounded to bf16 with fp32 output: a bf16 GEMM with fp32
           accumulation and fp32 output (oneDNN's f32 destination), residual stream fp32
  WIO      WI, and every matmul's output rounded to bf16 too: libtorch's bf16 matmuls (bf16 out),
           as ucm's bf16 path runs them (its residual stream stays fp32)
  hf_bf16  transformers' own bf16 (from_pretrained(dtype=torch.bfloat16)): every activation bf16

For each: the worst difference of any layer's post-RoPE K or V, in bf16 steps at that layer's
largest |value| (the measure tests/model/test_compute_dtype.cc prints for ucm), at layer 0 and
over all layers, and the teacher-forced top-1 agreement over each document's last 32 positions.
The documents are the five the C++ test uses (Debian's python3.11-doc).
"""
import argparse
import math
import os

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

DOCS = ["library/grp.rst.txt", "library/copy.rst.txt", "library/netrc.rst.txt", "tutorial/introduction.rst.txt",
        "library/fnmatch.rst.txt"]
ROOT = "/usr/share/doc/python3.11/html/_sources/"


def to_bf16(x):
    return x.to(torch.bfloat16).to(torch.float32)


def load(model_dir, variant):
    # hf_bf16 is loaded in bf16 (not converted after loading: Module.to would round RoPE's inv_freq
    # buffer to bf16 too, which transformers keeps fp32).
    dtype = torch.bfloat16 if variant == "hf_bf16" else torch.float32
    m = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, attn_implementation="eager").eval()
    if variant in ("fp32", "hf_bf16"):
        return m
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, (torch.nn.Linear, torch.nn.Embedding)):
                mod.weight.copy_(to_bf16(mod.weight))
    for mod in m.modules():
        if isinstance(mod, torch.nn.Linear):
            if "I" in variant:
                mod.register_forward_pre_hook(lambda _m, a: (to_bf16(a[0]),))
            if "O" in variant:
                mod.register_forward_hook(lambda _m, _a, o: to_bf16(o))
    return m


def kv_and_logits(model, ids):
    out = model(torch.tensor([ids]), use_cache=True)
    layers = out.past_key_values.layers
    return [l.keys[0].float() for l in layers], [l.values[0].float() for l in layers], out.logits[0].float()


def steps(want, got):
    scale = want.abs().max().item()
    return (want - got).abs().max().item() / 2.0 ** (math.frexp(scale)[1] - 1 - 7)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--model", default=os.path.join(here, "..", "models", "SmolLM2-135M-Instruct"))
    ap.add_argument("--tokens", type=int, default=512, help="each document's first N tokens")
    ap.add_argument("variants", nargs="*", default=["W", "WI", "WIO", "hf_bf16"])
    a = ap.parse_args()
    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(a.model)
    docs = [tok(open(ROOT + d).read())["input_ids"][: a.tokens] for d in DOCS]
    with torch.no_grad():
        ref_model = load(a.model, "fp32")
        ref = [kv_and_logits(ref_model, ids) for ids in docs]
        print(f"| variant | layer 0 (bf16 steps) | all layers (bf16 steps) | top-1 agreement | worst per layer |")
        print(f"|---|---|---|---|---|")
        for v in a.variants:
            m = load(a.model, v)
            per_layer, agree, total = None, 0, 0
            for ids, (rk, rv, rl) in zip(docs, ref):
                k, vv, logits = kv_and_logits(m, ids)
                s = [max(steps(rk[l], k[l]), steps(rv[l], vv[l])) for l in range(len(k))]
                per_layer = s if per_layer is None else [max(x, y) for x, y in zip(per_layer, s)]
                agree += (logits[-33:-1].argmax(-1) == rl[-33:-1].argmax(-1)).sum().item()
                total += 32
            print(f"| {v} | {per_layer[0]:.2f} | {max(per_layer):.2f} | {agree}/{total} | "
                  + " ".join(f"{x:.1f}" for x in per_layer) + " |", flush=True)


if __name__ == "__main__":
    main()
