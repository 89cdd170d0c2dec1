"""ucm.vllm.gpu_layout: vLLM 0.32's CUDA KV cache layouts, and loads into them through libucm's
device load (Store.load_device), on the host.

The caches are built as vLLM 0.32 builds them, in numpy (CI's environment has no torch; with torch
the same cases run on CPU tensors too): one int8 buffer for all layers (allocate_kv_cache,
v1/worker/utils.py:564), viewed as the 5D logical [L, B, H, N, C bytes] with the byte strides of
the resolved KVCacheLayout permutation (compute_layout_strides, v1/kv_cache_interface.py:338;
create_kv_cache_views, :377; the shape: compute_layer_kv_cache_shape_bytes, :319, C = (head_size
+ head_size_v) * dtype size, AttentionSpec.state_content_size_bytes, :549), then one view per layer
as the cache dtype (bf16 bits as uint16 here). FlashAttention and Triton declare no layout (the
default preference: LBNHC first, v1/attention/backends/utils.py:195; any of the six through
VLLM_KV_CACHE_LAYOUT); FlashInfer on compute capability 10 asks for LBHNC or BLHNC
(flashinfer.py:604). Every backend splits C as K then V (flash_attn.py:1252, triton_attn.py:796,
flashinfer.py:2168).

The loads run through the host-run stand-in of libucm_cuda.so (UCM_CUDA_PLUGIN, like
test_device.py: its device memory is host memory), and every byte of the cache buffer is checked
against a reference that places the stored payload (store_v1.md §4.2) by the 5D byte strides
directly, without gpu_layout's views.
"""
import math
import os

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

import ucm
from ucm.vllm import gpu_layout as gl
from test_store import DESC, H, L, T, D, S, fill_store, heads_slice

try:
    import torch
except ImportError:  # CI's .venv
    torch = None

needs_plugin = pytest.mark.skipif(not os.environ.get("UCM_CUDA_PLUGIN"), reason="needs UCM_CUDA_PLUGIN (the fake)")

# KVCacheLayout (v1/kv_cache_layout.py): stride permutations of the logical [L, B, H, N, C].
LAYOUTS = {"LBHNC": (0, 1, 2, 3, 4), "LBNHC": (0, 1, 3, 2, 4), "LHBNC": (0, 2, 1, 3, 4),
           "BLHNC": (1, 0, 2, 3, 4), "BLNHC": (1, 0, 3, 2, 4), "BHLNC": (1, 2, 0, 3, 4)}
ORDER = {"LBHNC": "BHN", "LBNHC": "BNH", "LHBNC": "HBN", "BLHNC": "BHN", "BLNHC": "BNH", "BHLNC": "BHN"}
BACKENDS = ["numpy"] + (["torch"] if torch is not None else [])


def payload(i):
    """Block i's payload [L][2][T][H][D] bf16 bytes: random, so that no two K/V, tokens or heads
    have equal bytes (test_store's pattern repeats every 256 bytes: its K equals its V)."""
    return np.random.default_rng(100 + i).integers(0, 256, L * 2 * T * H * D * S, dtype=np.uint8)


@pytest.fixture()
def filled(tmp_path):
    """A store with 3 blocks of namespace "py" (this file's payloads); yields (path, ns, tokens, hashes)."""
    return fill_store(tmp_path, payload)


def layout_strides(order, shape):
    """compute_layout_strides without fixed strides: what a single-group full-attention model gets
    (kv_cache_utils.py:1659, its block-outer block stride is the same L * page)."""
    strides, cur = [0] * 5, 1
    for dim in reversed(order):
        strides[dim] = cur
        cur *= shape[dim]
    return strides


class Cache:
    """A vLLM 0.32 KV cache: the int8 backing buffer, its 5D byte view's strides, per-layer views."""

    def __init__(self, layout, num_blocks, heads, engine_block, kernel_block=None, backend="numpy", seed=1):
        kb = kernel_block or engine_block
        self.ratio = engine_block // kb
        self.shape = (L, num_blocks * self.ratio, heads, kb, 2 * D * S)
        self.strides = layout_strides(LAYOUTS[layout], self.shape)
        size = math.prod(self.shape)
        self.raw = np.random.default_rng(seed).integers(-128, 128, size, dtype=np.int8)
        if backend == "numpy":
            v5 = as_strided(self.raw, self.shape, self.strides)
            self.layers = [v5[l].view(np.uint16) for l in range(L)]
            self.dtype = np.dtype(np.uint16)
        else:
            self._t = torch.from_numpy(self.raw)                  # shares self.raw
            v5 = torch.as_strided(self._t, self.shape, self.strides)
            self.layers = [v5[l].view(torch.bfloat16) for l in range(L)]
            self.dtype = torch.bfloat16

    def place(self, expect, l, kv, kernel_blk, row, head, data):
        """Reference: writes D elements' bytes at (layer, kernel block, head, token row), K or V."""
        sl, sb, sh, sn, _ = self.strides
        off = l * sl + kernel_blk * sb + head * sh + row * sn + kv * D * S
        expect[off: off + D * S] = data


def reference(cache, first_token, block_ids, engine_block, h0, h1, good):
    """The buffer after loading `good` blocks: payload(first_block + i) placed token by token."""
    expect = cache.raw.copy()
    kb = cache.shape[3]
    first = first_token // T
    for i in range(good):
        p = np.frombuffer(payload(first + i).tobytes(), dtype=np.int8).reshape(L, 2, T, H, D * S)
        for t in range(T):
            pos = first_token + i * T + t
            e, off = block_ids[pos // engine_block], pos % engine_block
            for l in range(L):
                for kv in range(2):
                    for h in range(h0, h1):
                        cache.place(expect, l, kv, e * cache.ratio + off // kb, off % kb, h - h0, p[l, kv, t, h])
    return expect


# ---------------------------------------------------------------- decisions
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_032_layout_is_accepted(layout, backend):
    c = Cache(layout, 6, H, 16, backend=backend)
    for kv in c.layers:
        lay = gl.describe(kv, 16, D, c.dtype, device_types=("cuda", "cpu"))
        assert lay.order == ORDER[layout] and lay.ratio == 1 and lay.kernel_block == 16
        # Our K/V views address what the backends' split addresses: transpose(1, 2).split(D, -1)
        k, v = gl.kv_views(kv, D)
        kb = (kv.transpose(0, 2, 1, 3) if backend == "numpy" else kv.transpose(1, 2))[..., :D]
        if backend == "numpy":
            assert k.__array_interface__["data"] == kb.__array_interface__["data"]
            assert k.strides == tuple(kb.strides[i] for i in (0, 2, 1, 3))
            assert v.__array_interface__["data"][0] == k.__array_interface__["data"][0] + D * S
        else:
            assert k.data_ptr() == kb.data_ptr() and k.stride() == tuple(kb.stride()[i] for i in (0, 2, 1, 3))
            assert v.data_ptr() == k.data_ptr() + D * S


def test_tp_shard_and_kernel_blocks_are_accepted():
    lay = gl.describe(Cache("LBNHC", 4, 1, 16).layers[0], 16, D, device_types=("cpu",))   # one head (TP 4)
    assert lay.shape[1] == 1
    c = Cache("LBNHC", 4, H, 32, kernel_block=16)        # 32-token engine blocks of 16-token kernel blocks
    lay = gl.describe(c.layers[0], 32, D, device_types=("cpu",))
    assert (lay.ratio, lay.kernel_block, lay.shape[0]) == (2, 16, 8)
    b, r = gl.token_coords(lay, [3, 1], 16, 48, 32)
    assert list(b) == [7] * 16 + [2] * 16 and list(r) == list(range(16)) * 2


def refused(kv, why, engine_block=16, dtype=None, device_types=("cuda", "cpu")):
    with pytest.raises(ValueError) as e:
        gl.describe(kv, engine_block, D, dtype, name="model.layers.0.self_attn.attn", device_types=device_types)
    msg = str(e.value)
    assert why in msg, msg
    assert "model.layers.0.self_attn.attn" in msg and "shape" in msg and "strides" in msg and "dtype" in msg
    return msg


def test_refusals_name_what_was_found():
    good = Cache("LBNHC", 4, H, 16).layers[0]
    msg = refused(good, "device type 'cpu' is not cuda", device_types=("cuda",))
    assert f"shape {tuple(good.shape)}" in msg and "on cpu" in msg
    # Other head sizes for V (head_size_v), NVFP4's K and V head groups, padded quantized rows.
    refused(np.zeros((4, H, 16, D + 4), np.uint16), "not K and V of head_dim 8")
    refused(np.zeros((4, 2 * H, 16, D), np.uint16), "not K and V of head_dim 8")
    # An fp8 cache (uint8 in vLLM) against a bf16 namespace.
    refused(np.zeros((4, H, 16, 2 * D), np.uint8), "dtype is not the namespace's uint16", dtype=np.dtype(np.uint16))
    # The content axis not innermost.
    refused(np.zeros((4, H, 2 * D, 16), np.uint16).transpose(0, 1, 3, 2), "content axis has stride 16")
    # Two (block, head, token) on one address.
    refused(np.broadcast_to(np.zeros((1, H, 16, 2 * D), np.uint16), (4, H, 16, 2 * D)), "axis B (size 4, stride 0)")
    refused(as_strided(np.zeros(4096, np.uint16), (4, H, 16, 2 * D), (2 * D * 16 * S, 2 * D * S, 2 * D * S, S)),
            "axis N (size 16, stride 16) overlaps")
    # Token axis against the engine block; blocks that are not whole engine blocks.
    refused(np.zeros((4, H, 16, 2 * D), np.uint16), "does not divide the engine block size 24", engine_block=24)
    refused(np.zeros((5, H, 16, 2 * D), np.uint16), "5 kernel blocks of 16 tokens", engine_block=32)
    # The 2025 flash-attention layout [2, B, N, H, D] that earlier ucm wrote.
    refused(np.zeros((2, 4, 16, H, D), np.uint16), "5 dimensions")


# ---------------------------------------------------------------- loads through the stand-in plugin
CASES = [  # layout, engine block, kernel block, heads, block ids, first token
    ("LBNHC", 16, None, None, [5, 2, 7], 0),
    ("LBNHC", 16, None, (1, 3), [5, 2, 7], 16),
    ("LBHNC", 16, None, None, [0, 6, 3], 0),
    ("LBHNC", 16, None, (2, 4), [4, 1, 2], 0),
    ("BLHNC", 16, None, (0, 1), [1, 3, 0], 0),
    ("BLNHC", 32, None, None, [2, 0], 0),
    ("BHLNC", 32, None, (1, 3), [1, 3], 16),
    ("LHBNC", 16, None, (3, 4), [6, 5, 4], 0),
    ("LBNHC", 32, 16, None, [3, 1], 0),
    ("LBHNC", 32, 16, (1, 3), [0, 2], 16),
]


@needs_plugin
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-eb{c[1]}-kb{c[2] or c[1]}-h{c[3]}-t{c[5]}" for c in CASES])
def test_load_into_032_layouts_is_bit_exact(filled, case, backend):
    layout, eb, kb, heads, block_ids, first_token = case
    path, ns, _, hashes = filled
    h0, h1 = heads or (0, H)
    cache = Cache(layout, 8, h1 - h0, eb, kernel_block=kb, backend=backend)
    lays = [gl.describe(c, eb, D, cache.dtype, device_types=("cuda", "cpu")) for c in cache.layers]
    expect = reference(cache, first_token, block_ids, eb, h0, h1, 3 - first_token // T)
    with ucm.Store(path) as r:
        for scratch in (gl.DEFAULT_SCRATCH_BYTES, 1):     # one chunk; one block per chunk
            cache.raw[:] = np.random.default_rng(1).integers(-128, 128, len(cache.raw), dtype=np.int8)
            good, st = gl.load(r, ns, hashes[first_token // T:], cache.layers, lays, block_ids,
                               first_token, eb, (h0, h1), H, scratch_bytes=scratch)
            assert good == 3 - first_token // T and not st.any()
            assert np.array_equal(cache.raw, expect), f"{layout}: the cache differs from the reference"
    # The save path's copy-out reads the same blocks back as payload [n][L][2][T][Hs][D].
    n = 3 - first_token // T
    out = np.empty((n, L, 2, T, h1 - h0, D), np.uint16) if backend == "numpy" else \
        torch.empty((n, L, 2, T, h1 - h0, D), dtype=torch.bfloat16)
    gl.read(cache.layers, lays, block_ids, first_token, 3 * T, eb, T, out)
    got = out.tobytes() if backend == "numpy" else out.view(torch.int16).numpy().tobytes()
    assert got == b"".join(heads_slice(payload(first_token // T + i), h0, h1) for i in range(n))


@needs_plugin
def test_a_failed_block_stops_the_load(filled):
    path, ns, _, hashes = filled
    hs = hashes.copy()
    hs[1] = np.frombuffer(bytes(range(16)), dtype=np.uint8)        # not in the store
    cache = Cache("LBNHC", 8, H, 16)
    lays = [gl.describe(c, 16, D, device_types=("cpu",)) for c in cache.layers]
    expect = reference(cache, 0, [5, 2, 7], 16, 0, H, 1)       # block 0 only
    with ucm.Store(path) as r:
        for scratch in (gl.DEFAULT_SCRATCH_BYTES, 1):
            cache.raw[:] = np.random.default_rng(1).integers(-128, 128, len(cache.raw), dtype=np.int8)
            good, st = gl.load(r, ns, hs, cache.layers, lays, [5, 2, 7], 0, 16, (0, H), H, scratch_bytes=scratch)
            assert good == 1 and ucm.code_name(int(st[1])) == "UCM_E_NOT_FOUND"
            assert np.array_equal(cache.raw, expect), "bytes beyond the first good block were written"
