"""SGLang's host pool as ucm sees it (sglang 0.5.23 MHATokenToKVPoolHost; docs/sglang.md): the KV
heads a TP rank holds, and where a ucm block's (layer, K/V) pages sit in the pool's one kv_buffer
tensor in each layout, as addresses and strides for libucm's strided paged loads and dumps."""
from __future__ import annotations

from typing import Any, Tuple

import numpy as np

LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_head")


def head_range(tp_rank: int, tp_size: int, num_kv_heads: int) -> Tuple[int, int]:
    """The KV heads [h0, h1) a TP rank holds (SGLang's split of an MHA model's KV heads: H / tp
    heads a rank when tp divides H; one replicated head, rank // (tp / H), when H divides tp).
    Raises ValueError otherwise."""
    if tp_size <= num_kv_heads:
        if num_kv_heads % tp_size:
            raise ValueError(f"TP size {tp_size} does not divide the {num_kv_heads} KV heads")
        per = num_kv_heads // tp_size
        return tp_rank * per, (tp_rank + 1) * per
    if tp_size % num_kv_heads:
        raise ValueError(f"TP size {tp_size} is not a multiple of the {num_kv_heads} KV heads")
    h = tp_rank // (tp_size // num_kv_heads)
    return h, h + 1


def page_pointers(kv_buffer: Any, layout: str, page_size: int, block_size: int, num_layers: int,
                  first_slots: np.ndarray) -> Tuple[np.ndarray, int, int]:
    """Destinations of ucm blocks in SGLang's host pool: for pages starting at host slots
    first_slots [n] (each a multiple of page_size), the address of every (page i, block j, layer l,
    K/V kv) page of a ucm load at index ((i * k + j) * L + l) * 2 + kv (k = page_size / block_size),
    and the token and head strides in bytes (ucm_store_load_ex's UCM_DEST_PAGED with strides).

    kv_buffer: the pool's one tensor (torch, or anything with data_ptr(), stride(), element_size()),
    of sglang 0.5.23's MHATokenToKVPoolHost.init_kv_buffer dims, index 0 of dim 0 = K, 1 = V:
      layer_first (2, L, size, H, D); page_first (2, size, L, H, D);
      page_first_direct (2, pages, L, P, H, D); page_head (2, pages, H, P, L, D).
    The last dim must be contiguous."""
    st = [int(s) for s in kv_buffer.stride()]
    if st[-1] != 1:
        raise ValueError(f"host KV buffer: the head_dim axis is not contiguous (strides {st})")
    isz = int(kv_buffer.element_size())
    base = int(kv_buffer.data_ptr())
    k = page_size // block_size
    slots = np.asarray(first_slots, dtype=np.int64).reshape(-1, 1, 1, 1)
    j = np.arange(k, dtype=np.int64).reshape(1, k, 1, 1)
    l = np.arange(num_layers, dtype=np.int64).reshape(1, 1, num_layers, 1)
    kv = np.arange(2, dtype=np.int64).reshape(1, 1, 1, 2)
    tok = slots + j * block_size          # host slot of each block's first token
    if layout == "layer_first":
        off = kv * st[0] + l * st[1] + tok * st[2]
        ts, hs = st[2], st[3]
    elif layout == "page_first":
        off = kv * st[0] + tok * st[1] + l * st[2]
        ts, hs = st[1], st[3]
    elif layout == "page_first_direct":
        off = kv * st[0] + (slots // page_size) * st[1] + l * st[2] + (j * block_size) * st[3]
        ts, hs = st[3], st[4]
    elif layout == "page_head":
        off = kv * st[0] + (slots // page_size) * st[1] + (j * block_size) * st[3] + l * st[4]
        ts, hs = st[3], st[2]
    else:
        raise ValueError(f"host pool layout {layout!r}: ucm reads {', '.join(LAYOUTS)}")
    return (base + off * isz).reshape(-1), ts * isz, hs * isz


class FlatPageView:
    """A one-page flat tensor seen as a host pool buffer of one page (the generic path's targets)."""

    def __init__(self, t: Any, dims: Tuple[int, ...]):
        self._t = t
        self._st = []
        acc = 1
        for d in reversed(dims):
            self._st.insert(0, acc)
            acc *= d
        if int(t.numel()) != acc:
            raise ValueError(f"target holds {int(t.numel())} elements, a page needs {acc}")

    def stride(self):
        return tuple(self._st)

    def element_size(self):
        return int(self._t.element_size())

    def data_ptr(self):
        return int(self._t.data_ptr())


def page_view(t: Any, layout: str, P: int, L_: int, H: int, D: int) -> FlatPageView:
    dims = {"layer_first": (2, L_, P, H, D), "page_first": (2, P, L_, H, D),
            "page_first_direct": (2, 1, L_, P, H, D), "page_head": (2, 1, H, P, L_, D)}[layout]
    return FlatPageView(t, dims)
