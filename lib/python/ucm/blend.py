"""Reusing stored documents anywhere in a prompt: RoPE shift and token selection (ucm/blend.h).

Source: CacheBlend (Yao et al., EuroSys 2025) §4.2-§4.3; the query-driven selection is
ProphetKV's observation (Wang et al. 2026, arXiv:2602.02579). A request's steps are in
ucm/blend.h's header comment and docs/blend.md.
"""
from __future__ import annotations

import ctypes as C
from typing import Optional, Tuple

import numpy as np

from . import _lib as L
from . import errors

_KEY_DTYPES = {np.dtype(np.float32): L.DTYPE_F32, np.dtype(np.float16): L.DTYPE_F16,
               np.dtype(np.uint16): L.DTYPE_BF16}


class RopeParams:
    """ucm_rope_params: head_dim, theta, scaling (ROPE_SCALING_*), factor, low_freq_factor,
    high_freq_factor, original_max_position_embeddings. From Store.rope_params(ns), or
    RopeParams.default(head_dim=...)."""

    def __init__(self, c: L.RopeParamsC):
        self.c = c

    @classmethod
    def default(cls, **fields) -> "RopeParams":
        c = L.lib().ucm_rope_default_params()
        for k, v in fields.items():
            setattr(c, k, v)
        return cls(c)

    def __getattr__(self, name):
        if name == "c":
            raise AttributeError(name)
        return getattr(self.c, name)


def rope_shift(rope: RopeParams, keys: np.ndarray, n_heads: int, delta: int,
               token_stride: Optional[int] = None) -> None:
    """Moves post-RoPE keys by delta positions, in place (store_v1.md §4.4).

    keys: [n_tokens][...] of float32, float16 or uint16 (bf16); token t's head h starts at element
    t * token_stride + h * head_dim (token_stride in elements, default n_heads * head_dim).
    Computed in fp32 with float64 angles. Raises ucm.Invalid, ucm.NotSupported (scaling)."""
    k = keys
    if not isinstance(k, np.ndarray) or not k.flags.c_contiguous or not k.flags.writeable:
        raise errors.Invalid("keys: a writable C-contiguous numpy array is needed (shifted in place)")
    dt = _KEY_DTYPES.get(k.dtype)
    if dt is None:
        raise errors.Invalid(f"keys: dtype {k.dtype}; expected float32, float16 or uint16 (bf16)")
    stride = token_stride if token_stride is not None else n_heads * rope.c.head_dim
    n_tokens = k.size // stride if stride else 0
    L.check(L.lib().ucm_rope_shift(C.byref(rope.c), k.ctypes.data, dt, n_tokens, n_heads, stride, delta),
            "ucm_rope_shift")


def _rows(stored, fresh):
    if (stored is None) != (fresh is None):
        raise errors.Invalid("stored and fresh: give both or neither")
    if stored is None:
        return None, None, 0
    s = np.ascontiguousarray(stored, dtype=np.float32)
    f = np.ascontiguousarray(fresh, dtype=np.float32)
    if s.shape != f.shape or s.ndim != 2:
        raise errors.Invalid(f"stored {s.shape} and fresh {f.shape}: expected the same [n_tokens][row] shape")
    return s, f, s.shape[1]


def _ptr(a, t):
    return a.ctypes.data_as(C.POINTER(t)) if a is not None else None


def blend_select(stored: np.ndarray, fresh: np.ndarray, ratio: float) -> Tuple[np.ndarray, np.ndarray]:
    """CacheBlend's selection (§4.3): the ceil(ratio * n) tokens whose rows deviate most (squared L2)
    between stored and fresh, float32 [n][row]. Returns (indices uint32 ascending, deviation
    float32 [n])."""
    s, f, row = _rows(stored, fresh)
    n = s.shape[0]
    out = np.zeros(max(n, 1), dtype=np.uint32)
    dev = np.zeros(max(n, 1), dtype=np.float32)
    cnt = C.c_size_t()
    L.check(L.lib().ucm_blend_select(_ptr(s, C.c_float), _ptr(f, C.c_float), n, row, ratio, _ptr(out, C.c_uint32),
                                     out.size, C.byref(cnt), _ptr(dev, C.c_float)), "ucm_blend_select")
    return out[:cnt.value].copy(), dev[:n].copy()


def blend_select_params(**fields) -> L.BlendSelectParamsC:
    """ucm_blend_select_params: the defaults (ratio 0.15, position_decay 128, relevance_exponent 2)
    with `fields` changed."""
    c = L.lib().ucm_blend_select_default_params()
    for k, v in fields.items():
        setattr(c, k, v)
    return c


def blend_select_relevant(n_tokens: int, *, stored: Optional[np.ndarray] = None,
                          fresh: Optional[np.ndarray] = None, doc_pos: Optional[np.ndarray] = None,
                          relevance: Optional[np.ndarray] = None, ratio: float = 0.15,
                          position_decay: float = 128.0, relevance_exponent: float = 2.0
                          ) -> Tuple[np.ndarray, np.ndarray]:
    """The selection of `ucm generate --blend`: score = deviation (stored vs fresh rows, or 1 when
    both are None) x exp(-doc_pos / position_decay) x relevance ^ relevance_exponent; the
    ceil(ratio * n) highest are selected. doc_pos: uint32 [n] (a token's place in its document);
    relevance: float32 [n] >= 0 (the question's attention on each token). relevance None is
    ucm_blend_select_weighted. Returns (indices uint32 ascending, score float32 [n])."""
    s, f, row = _rows(stored, fresh)
    dp = np.ascontiguousarray(doc_pos, dtype=np.uint32) if doc_pos is not None else None
    rel = np.ascontiguousarray(relevance, dtype=np.float32) if relevance is not None else None
    for name, a in (("doc_pos", dp), ("relevance", rel), ("stored", s)):
        if a is not None and a.shape[0] != n_tokens:
            raise errors.Invalid(f"{name}: {a.shape[0]} rows for {n_tokens} tokens")
    p = blend_select_params(ratio=ratio, position_decay=position_decay, relevance_exponent=relevance_exponent)
    out = np.zeros(max(n_tokens, 1), dtype=np.uint32)
    score = np.zeros(max(n_tokens, 1), dtype=np.float32)
    cnt = C.c_size_t()
    if rel is None:
        rc = L.lib().ucm_blend_select_weighted(C.byref(p), _ptr(s, C.c_float), _ptr(f, C.c_float),
                                               _ptr(dp, C.c_uint32), n_tokens, row, _ptr(out, C.c_uint32),
                                               out.size, C.byref(cnt), _ptr(score, C.c_float))
        L.check(rc, "ucm_blend_select_weighted")
    else:
        rc = L.lib().ucm_blend_select_relevant(C.byref(p), _ptr(s, C.c_float), _ptr(f, C.c_float),
                                               _ptr(dp, C.c_uint32), _ptr(rel, C.c_float), n_tokens, row,
                                               _ptr(out, C.c_uint32), out.size, C.byref(cnt),
                                               _ptr(score, C.c_float))
        L.check(rc, "ucm_blend_select_relevant")
    return out[:cnt.value].copy(), score[:n_tokens].copy()
