"""Moving token-major K/V in and out of vLLM's CPU paged KV cache.

vLLM's CPU attention (v1/attention/backends/cpu_attn.py) keeps one tensor per layer,
[num_blocks, num_kv_heads, block_size, 2 * head_size]; each (block, head) holds a K region of
block_size * head_size elements, then a V region, packed for the ISA the backend picked (AMX:
K [B/16][D/2][16][2], V [D/16][B/2][16][2]; vec: K [D][B], V [B][D]). The packing is the engine's:
writes go through its own op (cpu_attn_reshape_and_cache, what vLLM itself calls), and reads use
an index map that this module *measures* once per (dtype, block size, head size, ISA) by writing
coded values through that same op and reading where they land, so nothing here re-derives the
packing and a vLLM that changes it is followed (or caught: the map must be a permutation).
"""
from __future__ import annotations

from typing import Dict, Tuple

import torch

_MAPS: Dict[Tuple, Tuple[torch.Tensor, torch.Tensor]] = {}


def split(kv: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(key_cache, value_cache) views of a per-layer cache, as the backend passes them to the op."""
    nb, h, bs, d2 = kv.shape
    return kv.view(nb, h, bs * 2, d2 // 2).chunk(2, dim=2)


def write(kv: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor, isa: str) -> None:
    """Writes per-token K and V [n, H, D] (the cache dtype) at slot_mapping `slots` (int64 [n], slot
    = block * block_size + offset) of one layer's cache, through the engine's own op."""
    from vllm import _custom_ops as ops
    kc, vc = split(kv)
    ops.cpu_attn_reshape_and_cache(k.contiguous(), v.contiguous(), kc, vc, slots, isa)


def index_maps(dtype: torch.dtype, block_size: int, head_size: int, isa: str) -> Tuple[torch.Tensor, torch.Tensor]:
    """(k_map, v_map), int64 [block_size * head_size]: element t * D + d of a block's token-major
    K (V) sits at region offset k_map[t * D + d] (v_map[...]). Measured with the engine's op."""
    key = (dtype, block_size, head_size, isa)
    if key in _MAPS:
        return _MAPS[key]
    n = block_size * head_size
    code = torch.arange(n, dtype=torch.int64).view(block_size, 1, head_size)
    found = []
    # Two passes of 8-bit digits: every dtype holds 0..255 exactly.
    for shift in (0, 8):
        digit = ((code >> shift) & 0xFF).to(dtype)
        kv = torch.zeros(1, 1, block_size, 2 * head_size, dtype=dtype)
        write(kv, digit, digit, torch.arange(block_size, dtype=torch.int64), isa)
        found.append(kv.view(2, n).to(torch.int64))
    where = found[0] | (found[1] << 8)  # [2][n]: the token-major index each region slot holds
    maps = []
    for r in range(2):
        inv = torch.full((n,), -1, dtype=torch.int64)
        inv[where[r]] = torch.arange(n, dtype=torch.int64)
        if (inv < 0).any() or not torch.equal(torch.sort(where[r]).values, torch.arange(n)):
            raise RuntimeError(f"vLLM's CPU KV packing for {key} is not a permutation of the block: "
                               "ucm cannot read this cache layout")
        maps.append(inv)
    _MAPS[key] = (maps[0], maps[1])
    return _MAPS[key]


def read_blocks(kv: torch.Tensor, block_ids: torch.Tensor, isa: str) -> Tuple[torch.Tensor, torch.Tensor]:
    """Token-major K and V [n_blocks, block_size, H, D] of whole engine blocks of one layer's cache."""
    nb, h, bs, d2 = kv.shape
    d = d2 // 2
    k_map, v_map = index_maps(kv.dtype, bs, d, isa)
    regions = kv[block_ids].reshape(len(block_ids), h, 2, bs * d)
    k = regions[:, :, 0].index_select(-1, k_map).view(len(block_ids), h, bs, d).permute(0, 2, 1, 3)
    v = regions[:, :, 1].index_select(-1, v_map).view(len(block_ids), h, bs, d).permute(0, 2, 1, 3)
    return k, v
