"""A namespace's SGLang page alias table through libucm (ucm.h: ucm_sglang_pages_*; store_v1.md §12.1)."""
from __future__ import annotations

import ctypes as C
from typing import Any, Sequence, Tuple

import numpy as np

from .. import _lib as L
from .._handle import Handle
from .. import errors
from .._buffers import id16, u8ptr


def keys_array(keys: Sequence[Any]) -> np.ndarray:
    """Page keys as uint8 [n][32]: from SGLang's 64-hex strings, or 32-byte digests.
    Raises ucm.Invalid for anything else."""
    try:
        raw = b"".join(bytes.fromhex(k) if isinstance(k, str) else bytes(k) for k in keys)
    except ValueError as e:
        raise errors.Invalid(f"page keys: {e}") from None
    if len(raw) != 32 * len(keys):
        raise errors.Invalid("page keys: each must be 64 hex characters (a SHA-256 digest)")
    return np.frombuffer(raw, dtype=np.uint8).reshape(len(keys), 32)


class PageTable(Handle):
    """The alias table of namespace `ns` for SGLang page size `page_size`, held by libucm.
    Close it before its store. Thread-safe. Raises ucm.NotFound (no table: build it with `ucm
    sglang-pages STORE --page-size P`), ucm.Corruption."""

    def __init__(self, store: Any, ns: Any, page_size: int):
        self._store = store
        h = C.c_void_p()
        L.check(L.lib().ucm_sglang_pages_open(store._handle(), u8ptr(id16(ns, "ns")), page_size, C.byref(h)),
                f"SGLang page table (page size {page_size})")
        self._h = h
        k, n = C.c_uint32(), C.c_uint64()
        L.check(L.lib().ucm_sglang_pages_info(h, C.byref(k), C.byref(n)), "ucm_sglang_pages_info")
        self.page_size = page_size
        self.blocks_per_page = int(k.value)
        self.pages_at_open = int(n.value)

    def lookup(self, keys: np.ndarray) -> Tuple[np.ndarray, np.ndarray, int]:
        """keys: uint8 [n][32] (keys_array). Returns (present bool [n], blocks uint8 [n][k][16]: a
        listed page's block hashes, prefix: leading present pages). Never reads a payload."""
        n = len(keys)
        keys = np.ascontiguousarray(keys, dtype=np.uint8)
        blocks = np.zeros((max(n, 1), self.blocks_per_page, 16), dtype=np.uint8)
        present = np.zeros(max(n, 1), dtype=np.uint8)
        prefix = C.c_size_t()
        L.check(L.lib().ucm_sglang_pages_lookup(self._h, u8ptr(keys), n, u8ptr(blocks), u8ptr(present),
                                                C.byref(prefix)), "ucm_sglang_pages_lookup")
        return present[:n].astype(bool), blocks[:n], int(prefix.value)

    def close(self) -> None:
        if getattr(self, "_h", None):
            L.lib().ucm_sglang_pages_close(self._h)
            self._h = None
