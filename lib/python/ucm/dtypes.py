"""The payload dtypes of a ucm namespace (store_v1.md §7 `dtype`) and their names elsewhere: the
one table the package uses (the store's element sizes and C codes, the servers' torch dtypes).

    ucm name   torch name   bytes   C code (ucm/ucm.h UCM_DTYPE_*)
    "bf16"     bfloat16     2       UCM_DTYPE_BF16
    "fp16"     float16      2       UCM_DTYPE_F16
    "fp32"     float32      4       UCM_DTYPE_F32
"""
from __future__ import annotations

from typing import Any, Optional

from . import _lib as L

#: ucm name -> (torch name, bytes per element, C code)
TABLE = {"bf16": ("bfloat16", 2, L.DTYPE_BF16), "fp16": ("float16", 2, L.DTYPE_F16),
         "fp32": ("float32", 4, L.DTYPE_F32)}
BYTES = {k: v[1] for k, v in TABLE.items()}
CODE = {k: v[2] for k, v in TABLE.items()}
_FROM_TORCH = {v[0]: k for k, v in TABLE.items()}


def from_torch(dtype: Any) -> Optional[str]:
    """The ucm name of a torch dtype (a torch.dtype, "torch.bfloat16" or "bfloat16"); None when
    ucm stores no such dtype (int8, fp8, ...)."""
    return _FROM_TORCH.get(str(dtype).replace("torch.", ""))


def torch_name(name: str) -> str:
    """The torch name ("bfloat16", ...) of a ucm dtype name. KeyError for another name."""
    return TABLE[name][0]


def to_torch(name: str) -> Any:
    """The torch.dtype of a ucm dtype name (imports torch)."""
    import torch
    return getattr(torch, torch_name(name))
