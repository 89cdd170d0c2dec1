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
blocks, so one store serves every TP size. Pages SGLang computes itself (`batch_set_v1`) are
written, from the host pool by libucm, as blocks of a page namespace of this TP rank's head range
(pages written at TP 1 hold all heads and serve every TP size by head range)
(store_v1.md §12.2; the store steps to format 5 at the first), into this process's writer shard
of a sharded store (`sglang-<host>-tp<rank>`, or -2, -3 ... when taken) or into a single-writer
store nobody else writes; they are found later by any server with the same page size and head
range, counted by `ucm inspect` and collected by `ucm gc` like any block.

Contract with SGLang (read in sglang 0.5.23, docs/sglang_0.5.23_hicache_facts.md): the factory
calls `cls(storage_config, {})`, then `register_mem_pool_host(host_pool)`; every method returns a
miss on any error (`[False] * n`, `0`, `None`, `False`), logged once per kind: an exception or a
None from `batch_get_v1` would stop SGLang's prefetch thread for the life of the process.
Refused at construction, with a message: MLA models, no `store` in the extra config, a TP size
that neither divides nor is a multiple of the namespace's KV heads; hybrid models (host pools
besides "kv": Mamba, SWA, ...) when SGLang attaches them (on_host_pools_registered).

extra_config keys: "store" (path; or $UCM_STORE), "model_dir" (the model's directory, whose
fingerprint picks the namespace; default: SGLang's model_name when it is a directory or a hub id in
the Hugging Face cache), "namespace" (name or 32-hex id; default: the one that suits the model,
the pool's dtype and page size by the rule of store_v1.md §7.3, created by a writer when none
does), "io_threads" (default 8), "write" (default true; false: read only), "shard" (the writer
shard's name; default sglang-<host>-tp<rank>).
"""
from __future__ import annotations

import logging
import os
import re
import socket
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from .. import dtypes, errors
from ..model import descriptor, model_dir_of
from ..store import Namespace, Store, hash_root, namespace_id
from .host_layout import LAYOUTS, head_range, page_pointers, page_view
from .pages import PageTable, keys_array

try:  # the factory checks issubclass(cls, HiCacheStorage); without SGLang the class still imports
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage as _Base
except Exception:  # pragma: no cover - depends on the environment
    _Base = object

log = logging.getLogger("ucm.sglang")


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
        self.shard: Optional[str] = None
        self.store = self._open(path, int(extra.get("io_threads", 8)), bool(extra.get("write", True)),
                                extra.get("shard"))
        self._named = extra.get("namespace")
        self._model_dir = model_dir_of(extra.get("model_dir"), getattr(storage_config, "model_name", None))
        self._want = descriptor(self._model_dir)  # the model's fingerprint; the pool's dtype when it registers
        self.ns: Optional[Namespace] = None       # by the rule of store_v1.md §7.3 when the pool registers
        self.heads = head_range(self.tp_rank, self.tp_size, int(self._want["num_kv_heads"]))  # ValueError: refused
        self.table: Optional[PageTable] = None
        self.mem_pool_host = None
        self._geom: Optional[Tuple[str, int]] = None   # (layout, page_size) of the registered pool
        # Page namespaces (store_v1.md §12.2) by head range: "own" (this rank's, which it writes) and,
        # for a rank of TP > 1, "all" (all heads, written at TP 1: read by head range).
        self._page_descs: Dict[str, Dict[str, Any]] = {}
        self._page_nss: Dict[str, Namespace] = {}
        self._page_checked: Dict[str, float] = {}
        self._warned: set = set()
        self._lock = threading.Lock()
        self.stats = {"exists_keys": 0, "exists_hits": 0, "get_pages": 0, "get_ok": 0, "set_pages": 0,
                      "set_written": 0, "errors": 0}
        # Per call, since the last get_stats(), as SGLang's StorageMetrics holds them: pages, GB/s.
        self._io: Dict[str, List[float]] = {"prefetch_pgs": [], "backup_pgs": [], "prefetch_bandwidth": [],
                                            "backup_bandwidth": []}
        self._page_bytes = 0  # one page of this rank's heads in the host pool (K and V, every layer)
        log.info("ucm.sglang: store %s%s, model %s, TP rank %d/%d: KV heads [%d, %d)", path,
                 f" (writer shard {self.shard})" if self.shard else " (read only)", self._want["model_id"], self.tp_rank,
                 self.tp_size, self.heads[0], self.heads[1])

    # -- setup
    def _open(self, path: str, io_threads: int, write: bool, shard: Optional[str]) -> Store:
        """A writer shard of its own when writing (store_v1.md §11; a missing store is created
        sharded), else read-only."""
        if write:
            host = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname()).lstrip(".") or "host"
            base = (shard or os.environ.get("UCM_SHARD") or f"sglang-{host}-tp{self.tp_rank}")[:60]
            last = None
            for i in range(1, 9):
                name = base if i == 1 else f"{base}-{i}"
                try:
                    st = Store(path, "c", io_threads=io_threads, shard=name)  # a missing store: created sharded
                    self.shard = name
                    return st
                except errors.Busy as e:
                    last = e
            log.warning("ucm.sglang: store %s: no writer shard free (%s); serving it read-only. A single-writer "
                        "store has one writer: `ucm migrate %s --to-sharded` lets several processes write", path,
                        last, path)
        return Store(path, "r", io_threads=io_threads, refresh_interval_ms=200)

    def _pick_namespace(self, dtype: str, page_size: int) -> Namespace:
        """The namespace of this model in the pool's dtype whose block size divides the page size,
        by the one rule (store_v1.md §7.3, ucm_store_namespace_match; "namespace" in the extra
        config: that one, checked by the rule); a writer creates it when none suits
        (ucm_store_namespace_create). ucm.NotFound names both fingerprints."""
        want = {**self._want, "dtype": dtype}
        try:
            return self.store.match_namespace(want, page_size, self._named)
        except errors.NotFound:
            if self._named or self.shard is None:
                raise
        ns = self.store.create_namespace(want)
        log.info("ucm.sglang: created namespace %s in %s", ns.name, self.store.path)
        return ns

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        self.mem_pool_host = mem_pool_host
        try:
            self._check_pool(mem_pool_host)
        except Exception as e:  # a misfit pool: every call is a miss, said once at startup
            self._geom = None
            log.error("ucm.sglang: the host pool does not fit the store, every lookup will miss: %s", e)

    def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name: Any) -> None:
        """SGLang's hybrid controller registers every host pool group ("kv", "mamba", "swa", ...)."""
        if not hasattr(self, "registered_pools"):
            self.registered_pools = {}
        self.registered_pools[str(getattr(host_pool_name, "value", host_pool_name))] = host_pool

    def on_host_pools_registered(self) -> None:
        """Refuses hybrid models at attach (raising here fails SGLang's attach, with this message):
        ucm stores KV pages only, not the state of Mamba / sliding-window / sparse sidecar pools."""
        others = sorted(n for n in getattr(self, "registered_pools", {}) if n != "kv")
        if others:
            raise ValueError(f"ucm.sglang: hybrid models are not supported (host pools {others} besides kv): ucm "
                             "stores full-attention KV pages only")

    def _check_pool(self, pool: Any) -> None:
        layout, P = str(pool.layout), int(pool.page_size)
        if layout not in LAYOUTS:
            raise ValueError(f"host pool layout {layout!r}: ucm reads {', '.join(LAYOUTS)}")
        dt = dtypes.from_torch(getattr(pool, "dtype", None) or dtypes.torch_name(self._want["dtype"]))
        if dt is None:
            raise ValueError(f"host pool dtype {pool.dtype}: ucm stores {', '.join(dtypes.TABLE)}")
        self.ns = ns = self._pick_namespace(dt, P)
        want = {"layer_num": ns.num_layers, "head_num": self.heads[1] - self.heads[0], "head_dim": ns.head_dim}
        for attr, v in want.items():
            got = getattr(pool, attr, None)
            if got is not None and int(got) != v:
                raise ValueError(f"host pool {attr} {got}, namespace {ns.name} (TP rank {self.tp_rank}) needs {v}")
        try:
            self.table = PageTable(self.store, ns, P)
            log.info("ucm.sglang: %s pool, page size %d: %d pages of %d blocks listed", layout, P,
                     self.table.pages_at_open, self.table.blocks_per_page)
        except errors.NotFound as e:  # no page table: only pages SGLang writes are served
            log.warning("ucm.sglang: %s", e)
        d = ns.desc

        def desc(h0: int, h1: int) -> Dict[str, Any]:
            return {"model_id": d["model_id"], "weights_digest": d.get("weights_digest", ""), "dtype": d["dtype"],
                    "block_size": P, "num_layers": ns.num_layers, "num_kv_heads": h1 - h0, "head_dim": ns.head_dim,
                    "layout": 1, "hash_scheme": "sglang-sha256-page-v1",
                    "extra": {"sglang_pages": {"of": ns.id.hex(), "page_size": P, "head_begin": h0, "head_end": h1,
                                               "num_kv_heads": ns.num_kv_heads}}}
        self._page_bytes = 2 * ns.num_layers * P * (self.heads[1] - self.heads[0]) * ns.head_dim * dtypes.BYTES[dt]
        self._page_descs = {"own": desc(*self.heads)}
        if self.heads != (0, ns.num_kv_heads):
            self._page_descs["all"] = desc(0, ns.num_kv_heads)
        self._geom = (layout, P)

    def _pages_ns(self, which: str = "own", create: bool = False) -> Optional[Namespace]:
        """A page namespace (store_v1.md §12.2): looked up at most every 5 s until it exists;
        registered when `create` (a writer's first write; steps the store to format 5)."""
        if which in self._page_nss or which not in self._page_descs:
            return self._page_nss.get(which)
        with self._lock:
            if which not in self._page_nss and (create or time.monotonic() - self._page_checked.get(which, 0.0) > 5.0):
                self._page_checked[which] = time.monotonic()
                if create:
                    self._page_nss[which] = self.store.register_namespace(self._page_descs[which])
                else:
                    try:
                        self._page_nss[which] = self.store.namespace(namespace_id(self._page_descs[which]))
                    except errors.NotFound:
                        pass
        return self._page_nss.get(which)

    def _miss(self, kind: str, e: BaseException) -> None:
        self.stats["errors"] += 1
        if kind not in self._warned:
            self._warned.add(kind)
            log.warning("ucm.sglang: %s failed, answered as a miss (said once): %s: %s", kind, type(e).__name__, e)

    # -- lookups
    def _presence(self, karr: np.ndarray):
        """(aliased bool [n], their block hashes [n][k][16] or None, have bool [n], written: a list of
        (page namespace, head range to load or None for all of it, present bool [n]), own first)."""
        n = len(karr)
        if self.table is not None:
            aliased, blocks, _ = self.table.lookup(karr)
        else:
            aliased, blocks = np.zeros(n, dtype=bool), None
        have = aliased.copy()
        written = []
        for which, heads in (("own", None), ("all", self.heads)):
            pns = self._pages_ns(which)
            if pns is not None and not have.all():
                m = np.asarray(self.store.lookup(pns, np.ascontiguousarray(karr[:, :16])).present, dtype=bool)
                written.append((pns, heads, m))
                have |= m
        return aliased, blocks, have, written

    def batch_exists(self, keys: List[str], extra_info: Any = None) -> int:
        """The number of leading keys whose pages the store holds."""
        try:
            if not keys or self._geom is None:
                return 0
            _, _, have, _ = self._presence(keys_array(keys))
            prefix = len(keys) if have.all() else int(np.argmin(have))
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
            if not n or self._geom is None:
                return [False] * n
            layout, P = self._geom
            t0 = time.perf_counter()
            out = self._load_pages(keys, _first_slots(host_indices, n, P), layout, P, self.mem_pool_host.kv_buffer)
            self._record("prefetch", sum(out), time.perf_counter() - t0)
            return out
        except Exception as e:
            self._miss("batch_get_v1", e)
            return [False] * n

    def _load_pages(self, keys: List[str], first_slots: np.ndarray, layout: str, P: int, kv_buffer: Any) -> List[bool]:
        n = len(keys)
        karr = keys_array(keys)
        aliased, blocks, _, written = self._presence(karr)
        out = np.zeros(n, dtype=bool)
        self.stats["get_pages"] += n
        L_ = self.ns.num_layers
        sel = np.flatnonzero(aliased)
        if sel.size:  # the namespace's blocks, k a page, this rank's heads of all
            k = self.table.blocks_per_page
            ptrs, ts, hs = page_pointers(kv_buffer, layout, P, self.ns.block_size, L_, first_slots[sel])
            st = self.store.load(self.ns, blocks[sel].reshape(-1, 16), ptrs, paged=True,
                                 strides=(ts, hs), heads=self.heads)
            out[sel] = (np.asarray(st) == 0).reshape(sel.size, k).all(axis=1)
        for pns, heads, m in written:  # pages SGLang wrote: one block a page
            sel = np.flatnonzero(m & ~out)
            if sel.size:
                ptrs, ts, hs = page_pointers(kv_buffer, layout, P, P, L_, first_slots[sel])
                st = self.store.load(pns, np.ascontiguousarray(karr[sel, :16]), ptrs, paged=True, strides=(ts, hs),
                                     heads=heads)
                out[sel] = np.asarray(st) == 0
        self.stats["get_ok"] += int(out.sum())
        return out.tolist()

    def batch_get(self, keys: List[str], target_locations: Any = None, target_sizes: Any = None) -> List[Any]:
        """The generic path (no interface_v1): each target is one page's flat tensor as the host pool
        lays it out (get_data_page(index, flat=True)). Returns the targets filled, None for a miss."""
        out: List[Any] = [None] * len(keys)
        try:
            if self._geom is None or target_locations is None:
                return out
            layout, P = self._geom
            for i, (key, t) in enumerate(zip(keys, target_locations)):
                view = page_view(t, layout, P, self.ns.num_layers, self.heads[1] - self.heads[0], self.ns.head_dim)
                if self._load_pages([key], np.zeros(1, dtype=np.int64), layout, P, view)[0]:
                    out[i] = t
            return out
        except Exception as e:
            self._miss("batch_get", e)
            return [None] * len(keys)

    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> Any:
        return self.batch_get([key], [target_location] if target_location is not None else None)[0]

    # -- writes (store_v1.md §12.2)
    def batch_set_v1(self, keys: List[str], host_indices: Any, extra_info: Any = None) -> List[bool]:
        n = len(keys)
        try:
            if not n or self._geom is None:
                return [False] * n
            layout, P = self._geom
            first = _first_slots(host_indices, n, P)
            prior = None
            pk = getattr(extra_info, "prefix_keys", None) if extra_info is not None else None
            if pk:
                prior = pk[-1]
            t0, written = time.perf_counter(), self.stats["set_written"]
            out = self._save_pages(keys, first, layout, P, self.mem_pool_host.kv_buffer, prior)
            self._record("backup", self.stats["set_written"] - written, time.perf_counter() - t0)  # pages written
            return out
        except Exception as e:
            self._miss("batch_set_v1", e)
            return [False] * n

    def _save_pages(self, keys: List[str], first_slots: np.ndarray, layout: str, P: int, kv_buffer: Any,
                    prior: Optional[str]) -> List[bool]:
        n = len(keys)
        self.stats["set_pages"] += n
        if self.shard is None and self.store.mode == "r":
            if "read_only" not in self._warned:
                self._warned.add("read_only")
                log.info("ucm.sglang: serving read-only; pages SGLang computes are not written")
            return [False] * n
        karr = keys_array(keys)
        _, _, have, written = self._presence(karr)
        sel = np.flatnonzero(~have)
        if not sel.size:
            return [True] * n
        pns = self._pages_ns("own", create=True)
        # Parent of page i: the page before it (in this call, else SGLang's prefix_keys) when that
        # page is in this page namespace (there already, or written now), else the chain root: a
        # page after a precomputed one (served through the page table) or after a page this
        # namespace lacks starts a chain (store_v1.md §12.2), so gc never takes it for an orphan.
        own = np.zeros(n, dtype=bool)
        own[sel] = True
        for wns, _, m in written:
            if wns.id == pns.id:
                own |= m
        root = np.frombuffer(hash_root(pns.hash_seed), dtype=np.uint8)[None, :]
        before = np.vstack([keys_array([prior])[:, :16] if prior else root, karr[:-1, :16]])
        before_own = np.concatenate([[bool(prior) and self._holds(pns, prior)], own[:-1]])
        prev = np.where(before_own[:, None], before, root)
        ptrs, ts, hs = page_pointers(kv_buffer, layout, P, P, self.ns.num_layers, first_slots[sel])
        st = self.store.dump_pages(pns, np.ascontiguousarray(karr[sel, :16]), np.ascontiguousarray(prev[sel]),
                                   ptrs, (ts, hs))
        out = have.copy()
        out[sel] = np.asarray(st) == 0
        self.stats["set_written"] += int((np.asarray(st) == 0).sum())
        return out.tolist()

    def _holds(self, pns: Namespace, key: str) -> bool:
        """Whether page namespace pns holds the page of `key`."""
        return bool(np.asarray(self.store.lookup(pns, np.ascontiguousarray(keys_array([key])[:, :16])).present)[0])

    def batch_set(self, keys: List[str], values: Any = None, target_locations: Any = None,
                  target_sizes: Any = None) -> bool:
        """The generic path: values are flat page tensors as get_data_page(flat=True) gives them."""
        try:
            if self._geom is None or values is None:
                return False
            layout, P = self._geom
            ok = True
            for i, (key, v) in enumerate(zip(keys, values)):
                view = page_view(v, layout, P, self.ns.num_layers, self.heads[1] - self.heads[0], self.ns.head_dim)
                prior = keys[i - 1] if i else None
                ok = self._save_pages([key], np.zeros(1, dtype=np.int64), layout, P, view, prior)[0] and ok
            return ok
        except Exception as e:
            self._miss("batch_set", e)
            return False

    def set(self, key: str, value: Any = None, target_location: Any = None, target_sizes: Any = None) -> bool:
        return self.batch_set([key], [value] if value is not None else None)

    # -- misc
    def clear(self) -> None:
        pass

    def _record(self, kind: str, pages: int, seconds: float) -> None:
        """One call's pages and GB/s (the pages' bytes in the host pool over the call's wall time)."""
        with self._lock:
            self._io[kind + "_pgs"].append(int(pages))
            self._io[kind + "_bandwidth"].append(pages * self._page_bytes / max(seconds, 1e-9) / (1 << 30))

    def get_stats(self) -> Any:
        """SGLang's StorageMetrics (sglang.srt.observability.metrics_collector) of the calls since the
        last get_stats(): per batch_get_v1 the pages loaded (prefetch_pgs) and their GB/s
        (prefetch_bandwidth), per batch_set_v1 the pages stored and their GB/s (backup_*); SGLang's
        scheduler adds its prefetch stats to it and its StorageMetricsCollector exports them
        (`--enable-storage-metrics`). Outside SGLang (no such module): a dict of the same lists.
        The running totals are counters()."""
        with self._lock:
            io = {k: list(v) for k, v in self._io.items()}
            for v in self._io.values():
                v.clear()
        try:
            from sglang.srt.observability.metrics_collector import StorageMetrics
        except ImportError:
            return io
        return StorageMetrics(**io)

    def counters(self) -> Dict[str, int]:
        """Running totals: keys asked and found (exists_*), pages asked and loaded (get_pages, get_ok),
        pages to store and written (set_pages, set_written), calls answered as a miss (errors)."""
        return dict(self.stats)

    def close(self) -> None:
        if self.table is not None:
            self.table.close()
            self.table = None
        self.store.close()


def _first_slots(host_indices: Any, n: int, P: int) -> np.ndarray:
    """The first host slot of each of n pages of P slots (SGLang hands every slot of every page)."""
    idx = np.asarray(host_indices.cpu() if hasattr(host_indices, "cpu") else host_indices, dtype=np.int64).reshape(-1)
    if idx.size != n * P:
        raise ValueError(f"{idx.size} host indices for {n} pages of {P}")
    return idx.reshape(n, P)[:, 0]
