"""The fingerprint of a model directory, as `ucm precompute` computes it (docs/model.md).

A server (the vLLM connector) checks that a store namespace was produced by the model it runs:
model_id = the basename of config.json's `_name_or_path`, else of the directory; weights_digest =
MD5 over, for every tensor of the safetensors files in byte-wise name order,
``name NUL dtype NUL raw-bytes`` (LlamaModel::weights_digest, pipelines/model).
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path
from typing import Dict


def model_id(model_dir: str) -> str:
    d = Path(model_dir)
    try:
        name = json.loads((d / "config.json").read_text()).get("_name_or_path")
        if isinstance(name, str) and name.rstrip("/"):
            return os.path.basename(name.rstrip("/"))
    except (OSError, ValueError):
        pass
    return Path(os.path.abspath(model_dir)).name


def weights_digest(model_dir: str) -> str:
    """MD5 hex of the weights (reads every tensor once: about 1 s per 500 MB)."""
    d = Path(model_dir)
    idx = d / "model.safetensors.index.json"
    files = sorted(set(json.loads(idx.read_text())["weight_map"].values())) if idx.exists() else ["model.safetensors"]
    entries = []
    for fn in files:
        with open(d / fn, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
        for name, e in header.items():
            if name != "__metadata__":
                entries.append((name.encode(), e["dtype"], fn, 8 + n + e["data_offsets"][0],
                                e["data_offsets"][1] - e["data_offsets"][0]))
    h = hashlib.md5()
    for name, dtype, fn, off, size in sorted(entries):
        h.update(name + b"\0" + dtype.encode() + b"\0")
        with open(d / fn, "rb") as f:
            f.seek(off)
            left = size
            while left:
                chunk = f.read(min(left, 64 << 20))
                h.update(chunk)
                left -= len(chunk)
    return h.hexdigest()


def fingerprint(model_dir: str) -> Dict[str, str]:
    """{"model_id", "weights_digest"} of a model directory."""
    return {"model_id": model_id(model_dir), "weights_digest": weights_digest(model_dir)}
