"""LoRA adapters: each adapter's KV lives in a namespace of its own (store_v1.md §7.2).

vLLM keys a LoRA request's blocks by the adapter (v1/core/kv_cache_utils.py
_gen_lora_extra_hash_keys: lora_name and lora_path in every block's hash); the KV differs from the
base model's wherever the adapter touches k_proj / v_proj (or anything before them). ucm keeps
that KV apart by namespace: the base namespace's descriptor with `extra` replaced by
`{"lora": {"name": <lora_name>, "digest": <adapter digest>}}`. The digest (adapter_digest) covers
the adapter's files, so two adapters served under one name, or one adapter retrained in place,
never share blocks; the namespace id (MD5 of the descriptor) then seeds the chains, so an
adapter's block hashes differ from the base model's for the same tokens.
"""
from __future__ import annotations

import hashlib
import os
import struct
from typing import Any, Dict, Optional, Tuple

FINGERPRINT = ("model_id", "weights_digest", "dtype", "block_size", "num_layers", "num_kv_heads", "head_dim", "layout",
               "hash_scheme")   # store_v1.md §7 (extra is the adapter's own)
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")
_digests: Dict[Tuple[str, float, int], str] = {}


def adapter_digest(path: str) -> str:
    """SHA-256 (64 hex) over the adapter's files present in directory `path`, in the order of
    ADAPTER_FILES: for each, its name (UTF-8), a 0 byte, its length (u64 little-endian), its bytes.
    Raises FileNotFoundError when none is there."""
    names = [n for n in ADAPTER_FILES if os.path.isfile(os.path.join(path, n))]
    if not names:
        raise FileNotFoundError(f"LoRA adapter {path}: none of {', '.join(ADAPTER_FILES)}")
    st = [os.stat(os.path.join(path, n)) for n in names]
    key = (os.path.abspath(path), max(s.st_mtime for s in st), sum(s.st_size for s in st))
    if key in _digests:
        return _digests[key]
    h = hashlib.sha256()
    for n, s in zip(names, st):
        h.update(n.encode() + b"\0" + struct.pack("<Q", s.st_size))
        with open(os.path.join(path, n), "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    _digests[key] = h.hexdigest()
    return _digests[key]


def adapter_of(req) -> Optional[Tuple[str, str]]:
    """(lora_name, lora_path) of a vLLM request (Request or NewRequestData), None without LoRA."""
    lr = getattr(req, "lora_request", None)
    if lr is None:
        return None
    return (str(getattr(lr, "lora_name", "") or getattr(lr, "name", "")), str(getattr(lr, "lora_path", "") or ""))


def adapter_desc(base: Dict[str, Any], name: str, digest: str) -> Dict[str, Any]:
    """The adapter namespace's descriptor: the base namespace's fingerprint fields, `extra` =
    {"lora": {"name", "digest"}}, named <base name>/lora-<name>."""
    d = {k: base[k] for k in FINGERPRINT if k in base}
    d["extra"] = {"lora": {"name": name, "digest": digest}}
    d["name"] = f"{base.get('name', base.get('model_id', 'ns'))}/lora-{name}"[:200]
    return d
