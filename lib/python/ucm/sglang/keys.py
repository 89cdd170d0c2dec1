"""SGLang's HiCache page keys through libucm (ucm.h: ucm_sglang_page_hashes, ucm_sglang_namespace_seed)."""
from __future__ import annotations

import ctypes as C
from typing import Any, List, Optional

import numpy as np

from .. import _lib as L
from .. import errors
from .._buffers import u8ptr


def page_hashes(token_ids: Any, page_size: int, prior: Optional[bytes] = None) -> List[str]:
    """SGLang's page keys of the full pages of token_ids, as SGLang hands them to a storage backend:
    64 lower-case hex characters each, key_i = SHA-256(key_{i-1} || page i's ids as u32 LE).

    token_ids: ints in [0, 2^32). page_size: SGLang's --page-size (> 0). prior: the 32-byte digest
    to chain from (the previous page's key as bytes, or namespace_seed(...) for a chain that starts
    at the root), None for an unseeded root. A partial last page has no key. Raises ucm.Invalid."""
    toks = np.ascontiguousarray(np.asarray(token_ids, dtype=np.int64))
    if toks.ndim != 1:
        raise errors.Invalid(f"token_ids: expected one dimension, got shape {toks.shape}")
    if toks.size and (toks.min() < 0 or toks.max() > 0xFFFFFFFF):
        raise errors.Invalid("token_ids: ids must be in [0, 2^32)")
    if page_size <= 0:
        raise errors.Invalid(f"page_size: {page_size}, must be > 0")
    toks = toks.astype(np.uint32)
    p = None
    if prior is not None:
        if len(prior) != 32:
            raise errors.Invalid(f"prior: {len(prior)} bytes, a SHA-256 digest has 32")
        p = np.frombuffer(bytes(prior), dtype=np.uint8).copy()
    n = toks.size // page_size
    out = np.zeros((max(n, 1), 32), dtype=np.uint8)
    got = C.c_size_t()
    L.check(L.lib().ucm_sglang_page_hashes(u8ptr(p) if p is not None else None, toks.ctypes.data_as(L.u32p), toks.size,
                                           page_size, u8ptr(out), max(n, 1), C.byref(got)), "ucm_sglang_page_hashes")
    return [out[i].tobytes().hex() for i in range(got.value)]


def namespace_seed(extra_key: Optional[str] = None, cache_salt: Optional[str] = None) -> Optional[bytes]:
    """The prior of a root chain for a request's extra_key / cache_salt (SGLang's
    storage_namespace_seed): 32 bytes, or None when both are None (then the chain has no prior).
    The empty string is not None."""
    ek = extra_key.encode("utf-8") if extra_key is not None else None
    cs = cache_salt.encode("utf-8") if cache_salt is not None else None
    out = np.zeros(32, dtype=np.uint8)
    has = C.c_int(0)
    L.check(L.lib().ucm_sglang_namespace_seed(ek, len(ek or b""), cs, len(cs or b""), u8ptr(out), C.byref(has)),
            "ucm_sglang_namespace_seed")
    return out.tobytes() if has.value else None
