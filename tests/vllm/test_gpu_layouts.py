"""ucm.vllm.gpu_layout against vLLM 0.32's own code (run in .venv-vllm; CPU tensors, no GPU):
the per-layer views that vLLM's allocate path makes (create_kv_cache_views with the strides of
compute_layout_strides, what allocate_kv_cache hands to register_kv_caches) for every
KVCacheLayout, with and without kernel-block splitting, are accepted; their strides are those that
tests/python/test_vllm_gpu_layout.py builds in CI without vLLM; and K/V written through the
FlashAttention backend's own split (``kv_cache.transpose(1, 2).split(head_size, dim=-1)``,
flash_attn.py:1443, the view reshape_and_cache_flash writes) are read back by gpu_layout.read as
the store's payload, bit for bit."""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("vllm")
from vllm.v1.kv_cache_interface import (FullAttentionSpec, KVCacheTensor, compute_layout_strides,  # noqa: E402
                                        create_kv_cache_views)
from vllm.v1.kv_cache_layout import KVCacheLayout  # noqa: E402

from ucm.vllm import gpu_layout as gl  # noqa: E402

L, H, D, NB = 3, 4, 8, 6


def vllm_views(layout, block, kernel_block=None, dtype=torch.bfloat16):
    """The views allocate_kv_cache (v1/worker/utils.py:564) makes for one group of L layers."""
    spec = FullAttentionSpec(block_size=block, num_kv_heads=H, head_size=D, dtype=dtype)
    ls, bs, *_ = compute_layout_strides(spec, NB, L, layout)     # as get_kv_cache_config_from_groups
    t = KVCacheTensor(size=spec.page_size_bytes * NB * L, layers=[f"model.layers.{i}.self_attn.attn" for i in range(L)],
                      layer_stride=ls, block_stride=bs)
    raw = torch.zeros(t.size, dtype=torch.int8)
    return raw, create_kv_cache_views(raw, spec, NB, layout, t, kernel_block_size=kernel_block)


def ci_strides(order, shape):  # tests/python/test_vllm_gpu_layout.py: layout_strides
    strides, cur = [0] * 5, 1
    for dim in reversed(order):
        strides[dim] = cur
        cur *= shape[dim]
    return strides


CASES = [(lay, 16, None) for lay in KVCacheLayout] + [(lay, 32, None) for lay in KVCacheLayout] + \
        [(KVCacheLayout.LBNHC, 32, 16), (KVCacheLayout.LBHNC, 64, 16)]


@pytest.mark.parametrize("layout,block,kernel", CASES, ids=[f"{c[0].name}-{c[1]}-k{c[2]}" for c in CASES])
def test_vllm_views_are_accepted_and_read_back(layout, block, kernel):
    raw, views = vllm_views(layout, block, kernel)
    kb = kernel or block
    shape = (L, NB * (block // kb), H, kb, 2 * D * 2)
    want = ci_strides(layout.value, shape)
    for kv in views:
        assert [s * 2 for s in kv.stride()] == want[1:4] + [2], "the CI test builds other strides than vLLM"
        lay = gl.describe(kv, block, D, torch.bfloat16, device_types=("cpu",))
        assert lay.ratio == block // kb
    # K/V through FlashAttention's own split, token by token at slots of engine blocks [4, 1, 3].
    g = torch.Generator().manual_seed(3)
    block_ids, ntok = [4, 1, 3], 2 * block + block // 2
    k = torch.randn(L, ntok, H, D, generator=g).to(torch.bfloat16)
    v = torch.randn(L, ntok, H, D, generator=g).to(torch.bfloat16)
    for l, kv in enumerate(views):
        key_cache, value_cache = kv.transpose(1, 2).split(D, dim=-1)       # flash_attn.py:1443
        for p in range(ntok):
            e, off = block_ids[p // block], p % block
            b, r = e * (block // kb) + off // kb, off % kb   # kernel blocks: slot = kernel block * kb + row
            key_cache[b, r] = k[l, p]
            value_cache[b, r] = v[l, p]
    T = 16
    n = ntok // T
    lays = [gl.describe(kv, block, D, torch.bfloat16, device_types=("cpu",)) for kv in views]
    out = torch.empty((n, L, 2, T, H, D), dtype=torch.bfloat16)
    gl.read(views, lays, block_ids, 0, n * T, block, T, out)
    assert torch.equal(out[:, :, 0], k[:, :n * T].reshape(L, n, T, H, D).transpose(0, 1))
    assert torch.equal(out[:, :, 1], v[:, :n * T].reshape(L, n, T, H, D).transpose(0, 1))


def test_other_vllm_caches_are_refused():
    spec = FullAttentionSpec(block_size=16, num_kv_heads=H, head_size=D, head_size_v=4, dtype=torch.bfloat16)
    ls, bs, *_ = compute_layout_strides(spec, NB, 1, KVCacheLayout.LBNHC)
    t = KVCacheTensor(size=spec.page_size_bytes * NB, layers=["model.layers.0.attn"], layer_stride=ls, block_stride=bs)
    kv = create_kv_cache_views(torch.zeros(t.size, dtype=torch.int8), spec, NB, KVCacheLayout.LBNHC, t)[0]
    with pytest.raises(ValueError, match="not K and V of head_dim 8"):
        gl.describe(kv, 16, D, torch.bfloat16, device_types=("cpu",))
    _, views = vllm_views(KVCacheLayout.LBNHC, 16, dtype=torch.float16)
    with pytest.raises(ValueError, match="dtype is not the namespace's torch.bfloat16"):
        gl.describe(views[0], 16, D, torch.bfloat16, device_types=("cpu",))
    with pytest.raises(ValueError, match="device type 'cpu' is not cuda"):
        gl.describe(views[0], 16, D, torch.float16)
