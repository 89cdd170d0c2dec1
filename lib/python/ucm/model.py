"""A model directory's namespace identity, from libucm (ucm_model_fingerprint in ucm/ucm.h).

libucm is the one owner of the rule (ucm/model/identity.h, store_v1.md §7): the descriptor of the
namespace `ucm precompute` registers for a model, with its model_id (the basename of
config.json's ``_name_or_path``, else of the directory) and weights_digest (MD5 over every
tensor's ``name NUL dtype NUL raw-bytes`` in byte-wise name order). A server (the vLLM
connector, the SGLang backend) compares it with a store's namespaces; nothing here computes it.
"""
from __future__ import annotations

import ctypes as C
import json
import os
from typing import Any, Dict, Optional

from . import _lib as L
from . import errors


def descriptor(model_dir: str, **options: Any) -> Dict[str, Any]:
    """The namespace descriptor (a dict: model_id, weights_digest, dtype, block_size, num_layers,
    num_kv_heads, head_dim, layout, hash_scheme, extra) of the model in model_dir, with
    precompute's options (dtype="bf16", block_size=16, hash_bits=128, dense_layers=[0, 1],
    projection_seed=20240611, namespace_name) overridden by ``options``. Reads the whole weights
    once (about 0.4 s per 270 MB). Raises ucm.InvalidArgument naming the file or option."""
    lib = L.lib()
    opts = json.dumps(options).encode() if options else None
    path = os.fsencode(model_dir)
    need = C.c_size_t(0)
    cap = 1 << 16  # a descriptor is well under 1 KiB: one call, one read of the weights
    while True:
        buf = C.create_string_buffer(cap)
        rc = lib.ucm_model_fingerprint(path, opts, buf, len(buf), C.byref(need))
        if rc == errors.E_INVALID and need.value + 1 > cap:
            cap = need.value + 1
            continue
        L.check(rc, "ucm_model_fingerprint")
        break
    return json.loads(buf.value.decode())


def fingerprint(model_dir: str) -> Dict[str, str]:
    """{"model_id", "weights_digest"} of a model directory."""
    d = descriptor(model_dir)
    return {"model_id": d["model_id"], "weights_digest": d["weights_digest"]}


def model_id(model_dir: str) -> str:
    return fingerprint(model_dir)["model_id"]


def weights_digest(model_dir: str) -> str:
    """MD5 hex of the weights."""
    return fingerprint(model_dir)["weights_digest"]


def model_dir_of(model_dir: Optional[str], name: Optional[str] = None) -> str:
    """The local directory of a model (config.json and safetensors): ``model_dir`` when given,
    else ``name`` when it is a directory (a server's --model-path), else ``name``'s snapshot in
    the Hugging Face cache (a hub id such as "HuggingFaceTB/SmolLM2-135M-Instruct"; huggingface_hub,
    local files only: nothing is downloaded). Raises ValueError saying what to set."""
    if model_dir:
        if not os.path.isdir(model_dir):
            raise ValueError(f"model_dir {model_dir!r} is not a directory")
        return model_dir
    if name and os.path.isdir(name):
        return name
    if name:
        try:
            from huggingface_hub import snapshot_download
            return snapshot_download(str(name), local_files_only=True)
        except Exception:  # not installed, not a hub id, not in the cache
            pass
    raise ValueError(f"no model directory for model {name!r}: ucm computes the namespace's fingerprint from the "
                     'model\'s files; set "model_dir" in the extra config')
