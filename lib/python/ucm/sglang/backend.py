"""UcmHiCacheStorage: ucm as SGLang's HiCache storage tier (sglang 0.5.23 HiCacheStorage; docs/sglang.md).

Launch SGLang with
    --enable-hierarchical-cache --hicache-storage-backend dynamic
    --hicache-storage-backend-extra-config '{"backend_name": "ucm", "module_path": "ucm.sglang.backend",
        "class_name": "UcmHiCacheStorage", "interface_v1": 1, "store": "/srv/kv/corpus"}'

What it serves: pages of a ucm store's prefix-chain namespace (precomputed by `ucm precompute`, or
saved by the vLLM connector) through the namespace's SGLang page alias table (store_v1.md §12.1,
built by `ucm sglang-pages STORE --page-size P` or `ucm precompute --sglang-page-size P`), read by
libucm straight into SGLang's host pool (one ucm_store_load_ex per call, strided paged
destinations; no per-page Python copies). A TP rank reads its KV-head range of the all-heads
blocks, so one store serves every TP size. Pages SGLang computes itself are not written yet
(`batch_set_v1` and `set` answer False; store_v1.md §12.2 describes the page namespaces that will
hold them).

Contract with SGLang (read in sglang 0.5.23, docs/sglang_0.5.23_hicache_facts.md): the factory
calls `cls(storage_config, {})`, then `register_mem_pool_host(host_pool)`; every method returns a
miss on any error (`[False] * n`, `0`, `None`, `False`), logged once per kind: an exception or a
None from `batch_get_v1` would stop SGLang's prefetch thread for the life of the process.
Refused at construction, with a message: MLA models, no `store` in the extra config, a TP size
that neither divides nor is a multiple of the namespace's KV heads.

extra_config keys: "store" (path; or $UCM_STORE), "namespace" (name or 32-hex id; default: the
store's namespace whose model matches, or its only one), "io_threads" (default 8).
"""
from __future__ import annotations

import logging
import os
import threading
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from .. import errors
from ..store import Store
from .pages import PageTable, keys_array

try:  # the factory checks issubclass(cls, HiCacheStorage); without SGLang the class still imports
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage as _Base
except Exception:  # pragma: no cover - depends on the environment
    _Base = object

log = logging.getLogger("ucm.sglang")
LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_head")
_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


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


class UcmHiCacheStorage(_Base):
    """SGLang HiCacheStorage over a ucm store (module docstring)."""

    def __init__(self, storage_config: Any, kwargs: Optional[Dict[str, Any]] = None):
        extra = dict(getattr(storage_config, "extra_config", None) or {})
        if getattr(storage_config, "is_mla_model", False):
            raise ValueError("ucm.sglang: MLA models are not supported (a ucm block holds per-head K and V; "
                             "an MLA latent cache has no heads to split)")
        path = extra.get("store") or os.environ.get("UCM_STORE")
        if not path:
            raise ValueError('ucm.sglang: no store: set "store" in --hicache-storage-backend-extra-config '
                             "(or $UCM_STORE)")
        self.tp_rank = int(getattr(storage_config, "tp_rank", 0) or 0)
        self.tp_size = int(getattr(storage_config, "tp_size", 1) or 1)
        self.store = Store(path, "r", io_threads=int(extra.get("io_threads", 8)))
        self.ns = self._pick_namespace(extra.get("namespace"), getattr(storage_config, "model_name", None))
        self.heads = head_range(self.tp_rank, self.tp_size, self.ns.num_kv_heads)  # ValueError: refused
        self.table: Optional[PageTable] = None
        self.mem_pool_host = None
        self._geom: Optional[Tuple[str, int]] = None   # (layout, page_size) of the registered pool
        self._warned: set = set()
        self._lock = threading.Lock()
        self.stats = {"exists_keys": 0, "exists_hits": 0, "get_pages": 0, "get_ok": 0, "errors": 0}
        log.info("ucm.sglang: store %s, namespace %s, TP rank %d/%d reads KV heads [%d, %d)", path, self.ns.name,
                 self.tp_rank, self.tp_size, self.heads[0], self.heads[1])

    # -- setup
    def _pick_namespace(self, want: Optional[str], model_name: Optional[str]):
        if want:
            return self.store.namespace(want)
        all_ns = self.store.namespaces()
        if model_name:
            base = os.path.basename(str(model_name).rstrip("/"))
            match = [d for d in all_ns if d.get("model_id") in (model_name, base)]
            if len(match) == 1:
                return self.store.namespace(match[0]["id"])
        if len(all_ns) == 1:
            return self.store.namespace(all_ns[0]["id"])
        raise ValueError(f"ucm.sglang: {len(all_ns)} namespaces in {self.store.path}: name one with "
                         f'"namespace" in the extra config (`ucm inspect STORE` lists them)')

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        self.mem_pool_host = mem_pool_host
        try:
            self._check_pool(mem_pool_host)
        except Exception as e:  # a misfit pool: every call is a miss, said once at startup
            self._geom = None
            log.error("ucm.sglang: the host pool does not fit the store, every lookup will miss: %s", e)

    def _check_pool(self, pool: Any) -> None:
        layout, P = str(pool.layout), int(pool.page_size)
        ns = self.ns
        if layout not in LAYOUTS:
            raise ValueError(f"host pool layout {layout!r}: ucm reads {', '.join(LAYOUTS)}")
        want = {"layer_num": ns.num_layers, "head_num": self.heads[1] - self.heads[0], "head_dim": ns.head_dim}
        for attr, v in want.items():
            got = getattr(pool, attr, None)
            if got is not None and int(got) != v:
                raise ValueError(f"host pool {attr} {got}, namespace {ns.name} (TP rank {self.tp_rank}) needs {v}")
        dt = str(getattr(pool, "dtype", None) or "").replace("torch.", "")
        if dt and dt != _DTYPES.get(ns.dtype, ns.dtype):
            raise ValueError(f"host pool dtype {dt}, namespace {ns.name} holds {ns.dtype}")
        if P % ns.block_size:
            raise ValueError(f"page size {P} is not a multiple of the store's block size {ns.block_size}")
        try:
            self.table = PageTable(self.store, ns, P)
        except errors.NotFound as e:
            raise ValueError(str(e)) from None
        self._geom = (layout, P)
        log.info("ucm.sglang: %s pool, page size %d: %d pages of %d blocks listed", layout, P,
                 self.table.pages_at_open, self.table.blocks_per_page)

    def _miss(self, kind: str, e: BaseException) -> None:
        self.stats["errors"] += 1
        if kind not in self._warned:
            self._warned.add(kind)
            log.warning("ucm.sglang: %s failed, answered as a miss (said once): %s: %s", kind, type(e).__name__, e)

    # -- lookups
    def batch_exists(self, keys: List[str], extra_info: Any = None) -> int:
        """The number of leading keys whose pages the store holds (all their blocks)."""
        try:
            if not keys or self.table is None:
                return 0
            _, _, prefix = self.table.lookup(keys_array(keys))
            self.stats["exists_keys"] += len(keys)
            self.stats["exists_hits"] += prefix
            return prefix
        except Exception as e:
            self._miss("batch_exists", e)
            return 0

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    # -- reads (zero-copy: libucm writes into the host pool)
    def batch_get_v1(self, keys: List[str], host_indices: Any, extra_info: Any = None) -> List[bool]:
        n = len(keys)
        try:
            if not n or self.table is None or self._geom is None:
                return [False] * n
            layout, P = self._geom
            idx = np.asarray(host_indices.cpu() if hasattr(host_indices, "cpu") else host_indices, dtype=np.int64)
            if idx.size != n * P:
                raise ValueError(f"{idx.size} host indices for {n} pages of {P}")
            return self._load_pages(keys, idx.reshape(n, P)[:, 0], layout, P, self.mem_pool_host.kv_buffer)
        except Exception as e:
            self._miss("batch_get_v1", e)
            return [False] * n

    def _load_pages(self, keys: List[str], first_slots: np.ndarray, layout: str, P: int, kv_buffer: Any) -> List[bool]:
        n = len(keys)
        present, blocks, _ = self.table.lookup(keys_array(keys))
        sel = np.flatnonzero(present)
        self.stats["get_pages"] += n
        if not sel.size:
            return [False] * n
        k, L_ = self.table.blocks_per_page, self.ns.num_layers
        ptrs, ts, hs = page_pointers(kv_buffer, layout, P, self.ns.block_size, L_, first_slots[sel])
        st = self.store.load(self.ns, blocks[sel].reshape(-1, 16), [int(p) for p in ptrs], paged=True,
                             strides=(ts, hs), heads=self.heads)
        ok_blocks = (np.asarray(st) == 0).reshape(sel.size, k).all(axis=1)
        out = [False] * n
        for i, good in zip(sel, ok_blocks):
            out[int(i)] = bool(good)
        self.stats["get_ok"] += int(ok_blocks.sum())
        return out

    def batch_get(self, keys: List[str], target_locations: Any = None, target_sizes: Any = None) -> List[Any]:
        """The generic path (no interface_v1): each target is one page's flat tensor as the host pool
        lays it out (get_data_page(index, flat=True)). Returns the targets filled, None for a miss."""
        out: List[Any] = [None] * len(keys)
        try:
            if self._geom is None or target_locations is None:
                return out
            layout, P = self._geom
            for i, (key, t) in enumerate(zip(keys, target_locations)):
                view = _page_view(t, layout, P, self.ns.num_layers, self.heads[1] - self.heads[0], self.ns.head_dim)
                if self._load_pages([key], np.zeros(1, dtype=np.int64), layout, P, view)[0]:
                    out[i] = t
            return out
        except Exception as e:
            self._miss("batch_get", e)
            return [None] * len(keys)

    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> Any:
        return self.batch_get([key], [target_location] if target_location is not None else None)[0]

    # -- writes: not yet (store_v1.md §12.2)
    def batch_set_v1(self, keys: List[str], host_indices: Any, extra_info: Any = None) -> List[bool]:
        self._say_read_only()
        return [False] * len(keys)

    def batch_set(self, keys: List[str], values: Any = None, target_locations: Any = None,
                  target_sizes: Any = None) -> bool:
        self._say_read_only()
        return False

    def set(self, key: str, value: Any = None, target_location: Any = None, target_sizes: Any = None) -> bool:
        self._say_read_only()
        return False

    def _say_read_only(self) -> None:
        if "set" not in self._warned:
            self._warned.add("set")
            log.info("ucm.sglang: this ucm serves stored pages only; pages SGLang computes are not written")

    # -- misc
    def clear(self) -> None:
        pass

    def get_stats(self) -> Dict[str, int]:
        return dict(self.stats)

    def close(self) -> None:
        if self.table is not None:
            self.table.close()
            self.table = None
        self.store.close()


class _FlatPageView:
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


def _page_view(t: Any, layout: str, P: int, L_: int, H: int, D: int) -> _FlatPageView:
    dims = {"layer_first": (2, L_, P, H, D), "page_first": (2, P, L_, H, D),
            "page_first_direct": (2, 1, L_, P, H, D), "page_head": (2, 1, H, P, L_, D)}[layout]
    return _FlatPageView(t, dims)
