"""vLLM 0.32's CUDA KV cache layouts, checked and moved through libucm's device load (docs/vllm.md,
"The GPU path"). No vLLM import: the device check (scripts/device_check.sh) and the host tests use
this module on a machine without vLLM.

What vLLM 0.32 hands to ``register_kv_caches`` on a GPU (read from that version's code):

* One 4D view per layer, logical ``[B, H, N, C]``: B blocks, H the rank's KV heads, N tokens of a
  block, C content (``allocate_kv_cache``, v1/worker/utils.py:564, through
  ``create_kv_cache_views``, v1/kv_cache_interface.py:377; the shape is
  ``compute_layer_kv_cache_shape_bytes``, :319). The backends declare no ``get_kv_cache_shape``
  any more: the shape is the same for all of them.
* C is K then V of one (block, head, token): ``head_size + head_size_v`` elements
  (``AttentionSpec.state_content_size_bytes``, v1/kv_cache_interface.py:545-549). Every CUDA
  backend splits it on the last axis: FlashAttention ``kv_cache.transpose(1, 2).split(
  self.head_size, dim=-1)`` (v1/attention/backends/flash_attn.py:1252 and :1443), Triton
  (triton_attn.py:796, :829), FlashInfer (flashinfer.py:2168, :2661; only its NVFP4 cache, a uint8
  dtype ucm has no namespace for, puts K heads and V heads side by side instead).
* The memory order is one of the stride permutations of ``[L, B, H, N, C]``
  (``KVCacheLayout``, v1/kv_cache_layout.py; RFC #42082), resolved once for the engine
  (``resolve_kv_cache_layout``, v1/attention/backends/utils.py:259): ``VLLM_KV_CACHE_LAYOUT``,
  else the backends' ``supported_kv_cache_layouts`` (FlashAttention and Triton declare none; the
  default preference, utils.py:195, puts LBNHC first; FlashInfer on compute capability 10.x asks
  for LBHNC or BLHNC, flashinfer.py:604). C is innermost in all six, so the per-layer view's
  strides are those of ``compute_layout_strides`` (v1/kv_cache_interface.py:338) with the layer
  axis dropped: LBNHC ``(N*H*C, C, H*C, 1)``, LBHNC ``(H*N*C, N*C, C, 1)``, BLNHC / BLHNC the same
  with the block stride times L, BHLNC and LHBNC with H outside the layer or the block axis.
* Block size: ``CacheConfig.DEFAULT_BLOCK_SIZE`` is 16 (config/cache.py:72); FlashAttention,
  Triton and FlashInfer take any multiple of 16 (``get_supported_kernel_block_sizes``). When the
  kernel block is smaller than the engine's, the view holds kernel blocks: engine block b is
  kernel blocks ``b * r .. b * r + r - 1``, r = engine / kernel block (``create_kv_cache_views``).

Why these are not loaded *in place* by ``ucm_store_load_ex``: libucm's device load writes each
(layer, K|V) page of a ucm block as one dense run ``[T][Hs][D]`` (NHD) or ``[Hs][T][D]`` (HND) at
``base + slot * slot_stride``. In every 0.32 layout a K row of D elements is followed by that
token's V row (C = [K | V]), so K's rows sit 2 * D elements apart: no base, slot_stride or page
kind expresses that, and writing a dense page there would overwrite V (and the next tokens).
Refused rather than guessed. What is done instead: the device load writes dense NHD pages into a
device scratch buffer (checksum-verified blocks, pinned staging, batched host-to-device copies:
everything libucm's device path does), then one strided device-to-device copy per layer scatters
them into the cache through the same ``[..., :D]`` / ``[..., D:]`` views the backends use, at the
(block, token) of each position. A device load with a destination row pitch (libucm) would save
that copy; it is left open (docs/vllm.md).

The helpers take torch tensors (the connector, the device check) or numpy arrays with the same
strides (the host tests in CI, whose environment has no torch): the indexing is the same code.

Refused, each with a ValueError naming device, shape, strides and dtype: a device other than CUDA;
not 4 dims; C other than 2 * head_dim (MLA, head_size_v != head_size, padded per-token-head
quantization, NVFP4); a dtype other than the namespace's (fp8 caches are uint8 here); C not
innermost with unit stride, or strides whose spans overlap (two (block, head, token) places on
one address: not a permutation layout); a token axis that does not divide the engine block, or a
block count that is not whole engine blocks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence, Tuple

import numpy as np

# KVCacheLayout names (v1/kv_cache_layout.py) by the physical order of the per-layer axes B, H, N
# (outermost first); the layer axis is not visible in one layer's view.
_ORDER_NAMES = {"BNH": "LBNHC/BLNHC (NHD pages)", "BHN": "LBHNC/BLHNC/BHLNC (HND pages)",
                "HBN": "LHBNC (heads outside blocks)"}

DEFAULT_SCRATCH_BYTES = 64 << 20   # device scratch of one load chunk


@dataclass(frozen=True)
class GpuLayout:
    """One layer's accepted cache: a [B, H, N, 2 * D] view, K at [..., :D] and V at [..., D:]."""
    shape: Tuple[int, int, int, int]
    strides: Tuple[int, int, int, int]   # elements
    order: str                           # physical order of B, H, N, outermost first ("BNH", "BHN", "HBN", ...)
    kernel_block: int                    # N
    ratio: int                           # engine block / kernel block
    head_dim: int

    @property
    def name(self) -> str:
        return _ORDER_NAMES.get(self.order, self.order)


# ---- torch tensors and numpy arrays alike
def _np(x: Any) -> bool:
    return isinstance(x, np.ndarray)


def _strides(x: Any) -> Tuple[int, ...]:
    return tuple(s // x.itemsize for s in x.strides) if _np(x) else tuple(int(s) for s in x.stride())


def _device_type(x: Any) -> str:
    return "cpu" if _np(x) else x.device.type


def _itemsize(x: Any) -> int:
    return x.itemsize if _np(x) else x.element_size()


def _ptr(x: Any) -> int:
    return x.ctypes.data if _np(x) else int(x.data_ptr())


def _empty(shape: Tuple[int, ...], like: Any) -> Any:
    if _np(like):
        return np.empty(shape, dtype=like.dtype)
    import torch
    return torch.empty(shape, dtype=like.dtype, device=like.device)


def _index(a: np.ndarray, like: Any) -> Any:
    if _np(like):
        return a
    import torch
    return torch.from_numpy(a).to(like.device)


def _describe_tensor(kv: Any) -> str:
    dev = "cpu (numpy)" if _np(kv) else str(kv.device)
    return f"on {dev} with shape {tuple(kv.shape)}, strides {_strides(kv)}, dtype {kv.dtype}"


def describe(kv: Any, engine_block: int, head_dim: int, dtype: Any = None, *, name: str = "",
             device_types: Sequence[str] = ("cuda",)) -> GpuLayout:
    """Checks one layer's KV cache against vLLM 0.32's CUDA layouts (module docstring) and returns
    it as a GpuLayout, or raises ValueError naming the device, shape, strides, dtype and the reason.
    device_types: the host tests pass ("cuda", "cpu") to drive the same code through the stand-in
    CUDA plugin, whose device memory is host memory."""
    what = f"KV cache {name} " if name else "KV cache "

    def refuse(why: str):
        raise ValueError(f"UcmConnector: {what}{_describe_tensor(kv)}: {why}; ucm implements vLLM 0.32's CUDA "
                         "layouts (a per-layer [blocks, kv_heads, block_size, 2 * head_dim] view, K then V in the "
                         "last axis, any KVCacheLayout permutation) and refuses others rather than write blocks it "
                         "cannot place (docs/vllm.md, \"The GPU path\")")

    if _device_type(kv) not in device_types:
        refuse(f"device type {_device_type(kv)!r} is not {' or '.join(device_types)}")
    if len(kv.shape) != 4:
        refuse(f"{len(kv.shape)} dimensions, not 4")
    B, H, N, C = (int(x) for x in kv.shape)
    sB, sH, sN, sC = _strides(kv)
    if dtype is not None and kv.dtype != dtype:
        refuse(f"dtype is not the namespace's {dtype}")
    if C != 2 * head_dim:
        refuse(f"the last axis holds {C} elements, not K and V of head_dim {head_dim} (2 * {head_dim})")
    if sC != 1:
        refuse(f"the content axis has stride {sC}, not 1")
    if N <= 0 or engine_block % N:
        refuse(f"a block axis of {N} tokens does not divide the engine block size {engine_block}")
    ratio = engine_block // N
    if B % ratio:
        refuse(f"{B} kernel blocks of {N} tokens are not whole engine blocks of {engine_block}")
    # The (B, H, N) spans must nest without overlap above the C run: a permutation layout, maybe
    # with padding or other layers' pages between blocks; no two (block, head, token) on one address.
    span = C
    dims = sorted([(sB, B, "B"), (sH, H, "H"), (sN, N, "N")], key=lambda t: (t[0], t[1] > 1, t[2]))
    for st, size, ax in dims:
        if size > 1 and st < span:
            refuse(f"axis {ax} (size {size}, stride {st}) overlaps the {span} elements inside it")
        if size > 1:
            span = st * size
    order = "".join(ax for _, _, ax in reversed(dims))
    return GpuLayout((B, H, N, C), (sB, sH, sN, sC), order, N, ratio, head_dim)


def token_coords(lay: GpuLayout, block_ids: Sequence[int], tok0: int, tok1: int, engine_block: int
                 ) -> Tuple[np.ndarray, np.ndarray]:
    """(block index, token row) in the view of positions tok0..tok1-1 of a request whose engine
    blocks are block_ids: position p is in engine block block_ids[p // eb] at offset p % eb, that is
    kernel block block_ids[p // eb] * ratio + (p % eb) // N, row (p % eb) % N."""
    p = np.arange(tok0, tok1, dtype=np.int64)
    eb = np.asarray(block_ids, dtype=np.int64)[p // engine_block]
    off = p % engine_block
    b = eb * lay.ratio + off // lay.kernel_block
    if len(b) and (b.min() < 0 or b.max() >= lay.shape[0]):
        raise ValueError(f"engine blocks {sorted(set(int(x) for x in eb))} outside the cache's "
                         f"{lay.shape[0] // lay.ratio} blocks")
    return b, off % lay.kernel_block


def kv_views(kv: Any, head_dim: int) -> Tuple[Any, Any]:
    """K and V views [B, H, N, D] of a layer's cache: the split every 0.32 CUDA backend makes."""
    return kv[..., :head_dim], kv[..., head_dim:]


def load(store: Any, ns: Any, hashes: Any, caches: Sequence[Any], layouts: Sequence[GpuLayout],
         block_ids: Sequence[int], first_token: int, engine_block: int, heads: Tuple[int, int],
         total_heads: int, *, stream: int = 0, device: int = 0,
         scratch_bytes: int = DEFAULT_SCRATCH_BYTES) -> Tuple[int, np.ndarray]:
    """Loads ucm blocks `hashes` (a request's blocks from position first_token on, a multiple of
    the ucm block size T) into the layer caches, a chunk of blocks at a time: Store.load_device (NHD
    pages, slot i = page i) into a device scratch [L][2][chunk][T][Hs][D], then per layer the K and
    V views take those pages at the (block, token) of each position. Stops at the chunk with the
    first block that fails. Returns (good, status): good = the blocks before the first failure, all
    of them placed (nothing else is written); status per block of the chunks read (0 after them).
    Waits for its copies."""
    L = len(caches)
    h0, h1 = heads
    hs, d, T = h1 - h0, layouts[0].head_dim, ns.block_size
    n = len(hashes)
    status = np.zeros(n, dtype=np.int32)
    if n == 0:
        return 0, status
    like = caches[0]
    per_block = L * 2 * T * hs * d * _itemsize(like)
    chunk = max(1, min(n, scratch_bytes // per_block))
    scratch = _empty((L, 2, chunk, T, hs, d), like)
    bases = [_ptr(scratch[l, kv]) for l in range(L) for kv in range(2)]
    views = [kv_views(c, d) for c in caches]
    hd = (h0, h1) if (h0, h1) != (0, total_heads) else None
    good = 0
    for c0 in range(0, n, chunk):
        m = min(chunk, n - c0)
        st = np.asarray(store.load_device(ns, hashes[c0:c0 + m], bases, np.arange(m, dtype=np.int64), heads=hd,
                                          layout="NHD", stream=stream, device=device, wait=True))
        status[c0:c0 + m] = st
        bad = np.flatnonzero(st != 0)
        ok = int(bad[0]) if len(bad) else m
        if ok:
            t0 = first_token + c0 * T
            b, r = token_coords(layouts[0], block_ids, t0, t0 + ok * T, engine_block)
            bi, ri = _index(b, like), _index(r, like)
            for l in range(L):
                k, v = views[l]
                src = scratch[l, :, :ok].reshape(2, ok * T, hs, d)
                k[bi, :, ri] = src[0]
                v[bi, :, ri] = src[1]
        good += ok
        if len(bad):
            break
    if _device_type(like) == "cuda":   # the scratch is reused by the next chunk on this stream only
        import torch
        torch.cuda.current_stream(like.device).synchronize()
    return good, status


def read(caches: Sequence[Any], layouts: Sequence[GpuLayout], block_ids: Sequence[int], tok0: int, tok1: int,
         engine_block: int, T: int, out: Any) -> Any:
    """Copies positions tok0..tok1-1 (whole ucm blocks of T tokens) of every layer out of the caches
    into out, host [n][L][2][T][Hs][D] (the store's payload layout, store_v1.md §4.2, for this
    rank's heads): per layer a gather through the K and V views on the device, then one copy to the
    host (synchronous)."""
    n = (tok1 - tok0) // T
    d = layouts[0].head_dim
    b, r = token_coords(layouts[0], block_ids, tok0, tok1, engine_block)
    like = caches[0]
    bi, ri = _index(b, like), _index(r, like)
    for l, c in enumerate(caches):
        k, v = kv_views(c, d)
        kd, vd = k[bi, :, ri], v[bi, :, ri]                            # [n*T][Hs][D] each
        hs = kd.shape[-2]
        if _np(like):
            out[:, l, 0] = kd.reshape(n, T, hs, d)
            out[:, l, 1] = vd.reshape(n, T, hs, d)
        else:
            import torch
            out[:, l] = torch.stack((kd, vd)).reshape(2, n, T, hs, d).transpose(0, 1)
    return out
