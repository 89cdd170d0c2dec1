#!/usr/bin/env python3
"""Write a small Llama model directory for the device check (scripts/device_check.sh, docs/device.md).

The default model (SmolLM2-135M-Instruct, 538 MB) is too large to carry to the device machine, and
the tree has no small model. This writes one from the default model's config.json and tokenizer
(carried in .device/data/tokenizer by scripts/fetch_device_debs.sh): the same shapes (hidden size,
heads, KV heads, head dim, vocabulary, RoPE), fewer layers (--layers, default 4), and seeded
random weights (normal, std 0.02; norms 1), bf16 like the real checkpoint. The same arguments give
the same bytes on every machine (numpy's PCG64), so the weights digest, and so the namespace, is
the same wherever it is generated.

Needs only numpy. Usage:
    python3 scripts/make_device_model.py --tokenizer-dir .device/data/tokenizer --out DIR [--layers 4]
"""
from __future__ import annotations

import argparse
import json
import shutil
import struct
import sys
from pathlib import Path

import numpy as np


def bf16_bytes(a: np.ndarray) -> bytes:
    """float32 -> bf16 (round to nearest even), little-endian bytes."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    r = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)
    return r.astype("<u2").tobytes()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer-dir", required=True, help="config.json + tokenizer.json of the default model")
    ap.add_argument("--out", required=True, help="model directory to write")
    ap.add_argument("--layers", type=int, default=4, help="decoder layers (default 4)")
    ap.add_argument("--seed", type=int, default=20261126, help="seed of the weights")
    args = ap.parse_args()

    src, out = Path(args.tokenizer_dir), Path(args.out)
    cfg = json.loads((src / "config.json").read_text())
    stamp = json.dumps({"layers": args.layers, "seed": args.seed, "config": cfg}, sort_keys=True)
    if (out / ".ucm_device_model").exists() and (out / ".ucm_device_model").read_text() == stamp \
            and (out / "model.safetensors").exists():
        print(f"make_device_model: {out} is up to date")
        return 0

    H = int(cfg["hidden_size"])
    nq = int(cfg["num_attention_heads"])
    nkv = int(cfg.get("num_key_value_heads", nq))
    d = int(cfg.get("head_dim") or H // nq)
    inter = int(cfg["intermediate_size"])
    V = int(cfg["vocab_size"])
    tied = bool(cfg.get("tie_word_embeddings", False))
    cfg["num_hidden_layers"] = args.layers
    cfg["torch_dtype"] = "bfloat16"
    cfg["_ucm_note"] = f"random weights (seed {args.seed}) for the device check; not a trained model"

    rng = np.random.default_rng(args.seed)
    spec = [("model.embed_tokens.weight", (V, H), "normal"), ("model.norm.weight", (H,), "ones")]
    if not tied:
        spec.append(("lm_head.weight", (V, H), "normal"))
    for i in range(args.layers):
        p = f"model.layers.{i}."
        spec += [(p + "input_layernorm.weight", (H,), "ones"),
                 (p + "post_attention_layernorm.weight", (H,), "ones"),
                 (p + "self_attn.q_proj.weight", (nq * d, H), "normal"),
                 (p + "self_attn.k_proj.weight", (nkv * d, H), "normal"),
                 (p + "self_attn.v_proj.weight", (nkv * d, H), "normal"),
                 (p + "self_attn.o_proj.weight", (H, nq * d), "normal"),
                 (p + "mlp.gate_proj.weight", (inter, H), "normal"),
                 (p + "mlp.up_proj.weight", (inter, H), "normal"),
                 (p + "mlp.down_proj.weight", (H, inter), "normal")]

    header, blobs, off = {}, [], 0
    for name, shape, kind in spec:
        a = np.ones(shape, np.float32) if kind == "ones" else \
            (rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02))
        b = bf16_bytes(a)
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt", "ucm_note": cfg["_ucm_note"]}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)

    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "model.safetensors.tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    tmp.replace(out / "model.safetensors")
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        if (src / name).exists():
            shutil.copyfile(src / name, out / name)
    (out / ".ucm_device_model").write_text(stamp)
    print(f"make_device_model: {out}: {args.layers} layers, hidden {H}, heads {nq}/{nkv}x{d}, vocab {V}, "
          f"{off / 2**20:.1f} MiB of bf16 weights")
    return 0


if __name__ == "__main__":
    sys.exit(main())
