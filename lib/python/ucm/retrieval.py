"""Block representations and block-sparse retrieval (ucm/retrieval.h).

A server decoding with block-sparse attention keeps, per request, its blocks' representations in
a ReprBuffers (loaded with Store.load_repr) and asks a Retriever, once per decode step and layer,
which blocks each KV head attends to. Representations (store_v1.md §4.3): R0 mean key [D]
(UCM's ESA), R1 per-channel key min/max [2][D] (Quest, Tang et al. 2024 §3), R4 per-token
sign hash [T][B/8] bytes (UCM's GSA on device). Runs on the calling thread's CPU.
"""
from __future__ import annotations

import ctypes as C
from dataclasses import dataclass
from typing import List, Optional, Tuple

import numpy as np

from . import _lib as L
from ._handle import Handle
from . import errors

POLICIES = {"esa": L.POLICY_ESA, "quest": L.POLICY_QUEST, "gsa": L.POLICY_GSA, "psa": L.POLICY_PSA}
_NP_DTYPE = {L.DTYPE_F32: np.float32, L.DTYPE_BF16: np.uint16, L.DTYPE_F16: np.float16}


@dataclass(frozen=True)
class ReprInfo:
    """A namespace's representation shape: L layers, H KV heads, D head dim, T block size,
    hash_bits B of R4 (0: none), dtype (UCM_DTYPE_*) of R0/R1, sections (REPR_R0|R1|R4 bits),
    dense_layers (bit l: layer l kept dense)."""
    num_layers: int
    num_kv_heads: int
    head_dim: int
    block_size: int
    hash_bits: int
    dtype: int
    sections: int
    dense_layers: int

    @classmethod
    def from_c(cls, c: L.ReprInfoC) -> "ReprInfo":
        return cls(c.num_layers, c.num_kv_heads, c.head_dim, c.block_size, c.hash_bits, c.dtype, c.sections,
                   c.dense_layers)

    def to_c(self) -> L.ReprInfoC:
        c = L.ReprInfoC()
        c.struct_size = C.sizeof(L.ReprInfoC)
        for f in ("num_layers", "num_kv_heads", "head_dim", "block_size", "hash_bits", "dtype", "sections",
                  "dense_layers"):
            setattr(c, f, getattr(self, f))
        return c


def repr_encode(info: ReprInfo, keys: np.ndarray, projection: np.ndarray) -> np.ndarray:
    """The BLOCK_REPR payload (store_v1.md §4.3: R0 mean key, R1 key bounds, R4 sign hash) of one
    block, by the same code as `ucm precompute`, for Store.dump(..., reprs=[...]).
    keys: post-RoPE keys [L][T][H][D] (converted to float32); projection: float32 [L][H][D][B], the
    namespace's r4_projection attachment (Store.attachment(ns, "r4_projection")). Returns uint8
    bytes. Raises ucm.Invalid (shapes, a namespace without R4)."""
    k = np.ascontiguousarray(keys, dtype=np.float32)
    want = (info.num_layers, info.block_size, info.num_kv_heads, info.head_dim)
    if k.shape != want:
        raise errors.Invalid(f"keys: shape {k.shape}, expected [L][T][H][D] = {want}")
    p = np.ascontiguousarray(np.frombuffer(projection, dtype=np.float32) if isinstance(projection, (bytes, bytearray))
                             else projection, dtype=np.float32)
    if p.size != info.num_layers * info.num_kv_heads * info.head_dim * info.hash_bits:
        raise errors.Invalid(f"projection: {p.size} floats, expected [L][H][D][B] = "
                             f"{info.num_layers * info.num_kv_heads * info.head_dim * info.hash_bits}")
    c = info.to_c()
    need = C.c_size_t()
    rc = L.lib().ucm_repr_encode(C.byref(c), None, None, None, 0, C.byref(need))
    if rc not in (errors.OK, errors.E_INVALID) or need.value == 0:
        L.check(rc, "ucm_repr_encode")
    out = np.zeros(need.value, dtype=np.uint8)
    L.check(L.lib().ucm_repr_encode(C.byref(c), k.ctypes.data_as(L.f32p), p.ctypes.data_as(L.f32p), out.ctypes.data,
                                    out.size, C.byref(need)), "ucm_repr_encode")
    return out


class ReprBuffers:
    """Representation arrays of one request (numpy, owned here), laid out for scoring:
    r0 [L][Hs][C][D], r1 [L][Hs][C][2][D] (dtype: float32, or the namespace's as stored: bf16 as
    uint16), r4 [L][Hs][C][T][B/8] uint8, for the KV heads heads=(h0, h1) and capacity C blocks.
    sections: which arrays to hold (REPR_* bits; default those the namespace has)."""

    def __init__(self, info: ReprInfo, capacity: int, *, heads: Optional[Tuple[int, int]] = None,
                 dtype: int = L.DTYPE_F32, sections: Optional[int] = None):
        h0, h1 = heads if heads else (0, info.num_kv_heads)
        hs = h1 - h0
        secs = info.sections if sections is None else sections
        npd = _NP_DTYPE[dtype]
        Lr, D = info.num_layers, info.head_dim
        self.info, self.capacity, self.heads = info, capacity, (h0, h1)
        self.r0 = np.zeros((Lr, hs, capacity, D), dtype=npd) if secs & L.REPR_R0 else None
        self.r1 = np.zeros((Lr, hs, capacity, 2, D), dtype=npd) if secs & L.REPR_R1 else None
        self.r4 = (np.zeros((Lr, hs, capacity, info.block_size, info.hash_bits // 8), dtype=np.uint8)
                   if secs & L.REPR_R4 and info.hash_bits else None)
        c = L.ReprBuffersC()
        c.struct_size = C.sizeof(L.ReprBuffersC)
        c.head_begin, c.head_end = (h0, h1) if heads else (0, 0)
        c.dtype = dtype
        c.capacity = capacity
        c.r0 = self.r0.ctypes.data if self.r0 is not None else None
        c.r1 = self.r1.ctypes.data if self.r1 is not None else None
        c.r4 = self.r4.ctypes.data_as(L.u8p) if self.r4 is not None else None
        self.c = c


@dataclass
class RetrieverParams:
    """ucm_retriever_params (defaults: RetrieverParams.default(), or .load(yaml) for
    configs/retrieval.yaml). The budget of a step, in blocks: top_k when > 0, else
    max(min_blocks, ceil(sparse_ratio * n_blocks)), windows included."""
    policy: int
    sink_blocks: int
    local_blocks: int
    sparse_ratio: float
    min_blocks: int
    top_k: int
    psa_tau: float
    psa_max_blocks: int
    reuse_steps: int
    shared_heads: int
    honor_dense_layers: int

    _FIELDS = ("policy", "sink_blocks", "local_blocks", "sparse_ratio", "min_blocks", "top_k", "psa_tau",
               "psa_max_blocks", "reuse_steps", "shared_heads", "honor_dense_layers")

    @classmethod
    def from_c(cls, c: L.RetrieverParamsC) -> "RetrieverParams":
        return cls(*(getattr(c, f) for f in cls._FIELDS))

    @classmethod
    def default(cls) -> "RetrieverParams":
        return cls.from_c(L.lib().ucm_retriever_default_params())

    @classmethod
    def load(cls, yaml_path: str) -> "RetrieverParams":
        """Reads a YAML file like configs/retrieval.yaml over the defaults. Raises ucm.Invalid naming
        a bad key, ucm.IO for a missing file."""
        c = L.lib().ucm_retriever_default_params()
        L.check(L.lib().ucm_retriever_params_load(str(yaml_path).encode(), C.byref(c)), f"loading {yaml_path}")
        return cls.from_c(c)

    def to_c(self) -> L.RetrieverParamsC:
        c = L.lib().ucm_retriever_default_params()
        for f in self._FIELDS:
            setattr(c, f, getattr(self, f))
        return c


class Retriever(Handle):
    """A retriever for one request (ucm_retriever_t; it keeps the reuse_steps state per layer).
    projection: float32 [L][H][D][B], the namespace's r4_projection attachment; required for GSA.
    Not thread-safe: one thread at a time."""

    def __init__(self, info: ReprInfo, params: Optional[RetrieverParams] = None,
                 projection: Optional[np.ndarray] = None):
        self._params = (params or RetrieverParams.default()).to_c()
        self._info = info.to_c()
        proj = None
        if projection is not None:
            proj = np.ascontiguousarray(projection, dtype=np.float32)
        h = C.c_void_p()
        L.check(L.lib().ucm_retriever_create(C.byref(self._params), C.byref(self._info),
                                             proj.ctypes.data_as(L.f32p) if proj is not None else None,
                                             C.byref(h)), "ucm_retriever_create")
        self._h = h
        self.info = info

    def select(self, layer: int, q: np.ndarray, reprs: ReprBuffers, n_blocks: int, *, group_size: int,
               valid: Optional[np.ndarray] = None, top_k: int = 0) -> List[np.ndarray]:
        """The blocks to attend to at one decode step of one layer.

        q: [n_q_heads][D] post-RoPE queries, float32 (or uint16 holding bf16), n_q_heads =
        group_size * Hs. valid: uint8/bool [n_blocks] (0: representations not loaded, always
        selected), None = all valid. top_k > 0 overrides the params' budget. Returns one uint32
        array of ascending block indices per set: one set (shared heads, dense layer) or Hs."""
        if not self._h:
            raise errors.Invalid("the retriever was closed")
        qa = np.ascontiguousarray(q)
        if qa.dtype == np.float32:
            qd = L.DTYPE_F32
        elif qa.dtype == np.uint16:
            qd = L.DTYPE_BF16
        else:
            raise errors.Invalid(f"q: dtype {qa.dtype}; expected float32 (or uint16 holding bf16)")
        va = None
        if valid is not None:
            va = np.ascontiguousarray(valid, dtype=np.uint8)
        query = L.QueryC()
        query.struct_size = C.sizeof(L.QueryC)
        query.layer = layer
        query.q = qa.ctypes.data
        query.q_dtype = qd
        query.n_q_heads = qa.shape[0]
        query.group_size = group_size
        query.reprs = C.pointer(reprs.c)
        query.n_blocks = n_blocks
        query.valid = va.ctypes.data_as(L.u8p) if va is not None else None
        query.top_k = top_k
        hs = reprs.heads[1] - reprs.heads[0]
        cap = max(n_blocks, 1)
        idx = np.zeros(hs * cap, dtype=np.uint32)
        counts = np.zeros(hs, dtype=np.uint32)
        n_sets = C.c_uint32()
        L.check(L.lib().ucm_retriever_select(self._h, C.byref(query), idx.ctypes.data_as(L.u32p), cap,
                                             counts.ctypes.data_as(L.u32p), C.byref(n_sets)),
                "ucm_retriever_select")
        return [idx[s * cap: s * cap + int(counts[s])].copy() for s in range(n_sets.value)]

    def reset(self) -> None:
        """Forgets the reuse state (a new request, or the blocks changed)."""
        if self._h:
            L.lib().ucm_retriever_reset(self._h)

    def close(self) -> None:
        if getattr(self, "_h", None):
            L.lib().ucm_retriever_free(self._h)
            self._h = None

