"""UcmConnector: vLLM (v1 KV connector API) serving prompts from a ucm store (docs/vllm.md).

Configured by ``KVTransferConfig(kv_connector="UcmConnector",
kv_connector_module_path="ucm.vllm.connector", kv_role="kv_both", kv_connector_extra_config={...},
kv_load_failure_policy="recompute")``; the extra config keys:

  store       the store directory (required)
  namespace   name or id; default: the namespace that suits the engine by store_v1.md §7.3 (model id,
              weights digest, dtype, layers, KV heads, head dim, a block size dividing vLLM's); a
              saving server creates it in a store without one
  io_threads  block I/O threads of the store handle (default 8)
  save        write the full blocks of new prompts (default: kv_role is kv_both or kv_producer)
  load        serve prompts from the store (default true)

Scheduler side (the engine process): the prompt's ids are hashed with the namespace's hash seed
(ucm.hash_blocks, the same code as `ucm precompute`), looked up in the store's in-memory index (no
disk access), and the prefix hit is reported in whole engine blocks, leaving at least one prompt
token to compute. Worker side: the hit's blocks are loaded (checksum-verified, KV-head range of
this TP rank) into host staging and written into the engine's blocks with the engine's own
cache-write op; a block that fails (missing, corrupt) is reported by
get_block_ids_with_load_errors and vLLM recomputes from it. New prompts' full blocks are copied
out of the cache at the end of their last prefill step and dumped (with R0/R1/R4 representations)
by a background thread, so a step waits only for the copy.

Synchronous loads: vLLM runs start_load_kv before the forward only for sync loads
(load_async=False), which is what a CPU engine wants.

KV events (vLLM's --kv-events-config with enable_kv_cache_events; connector_events.py): the blocks a save
stored and the blocks vLLM keeps from a load are reported as BlockStored events of medium
ucm.event_medium(store), from TP rank 0, and published by vLLM's own publisher (take_events).
"""
from __future__ import annotations

import logging
import os
import re
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import numpy as np
import torch

from vllm.distributed.kv_transfer.kv_connector.v1.base import (KVConnectorBase_V1, KVConnectorMetadata,
                                                                 KVConnectorRole)
from vllm.distributed.kv_events import BlockRemoved, BlockStored, KVConnectorKVEvents

import ucm
from ucm import dtypes
from ucm.model import descriptor, model_dir_of

from . import connector_events as events
from . import metrics
from .planner import LoadSpec, Planner, SaveSpec, bypass_reason, head_range
from .lora import adapter_desc, adapter_digest, adapter_of
from .validity import BlockValidity, StepReq
from .save_queue import SaveQueue

log = logging.getLogger("ucm.vllm")
if not log.handlers:  # vLLM configures only its own loggers: the connector's lines go to stderr
    _h = logging.StreamHandler()
    _h.setFormatter(logging.Formatter("%(levelname)s %(asctime)s [ucm.vllm] %(message)s", "%m-%d %H:%M:%S"))
    log.addHandler(_h)
    log.setLevel(logging.INFO)
    log.propagate = False



@dataclass
class UcmMetadata(KVConnectorMetadata):
    loads: List[LoadSpec] = field(default_factory=list)
    saves: List[SaveSpec] = field(default_factory=list)
    steps: List[StepReq] = field(default_factory=list)   # every scheduled request (validity.py)
    finished: List[str] = field(default_factory=list)
    planned: bool = True      # False: planning the step failed; the worker trusts no block


_COUNTERS = ("loaded_blocks", "loaded_bytes", "load_seconds", "load_errors", "saved_blocks", "saved_bytes",
             "saves_dropped", "saves_cut_at_bad_kv", "bad_reads_reported", "store_errors")


class UcmKVEvents(events.EventQuorum, KVConnectorKVEvents):
    """The connector's KV events of a step (BlockStored, medium ucm.event_medium(store)), from the
    worker to the scheduler in KVConnectorOutput.kv_cache_events; vLLM's KVOutputAggregator merges
    the TP workers' containers and only events every reporting worker gave are published."""


def _layer_index(name: str) -> int:
    m = re.search(r"layers\.(\d+)\.", name)
    if not m:
        raise ValueError(f"cannot tell the layer index of KV cache {name!r}")
    return int(m.group(1))


class UcmConnector(KVConnectorBase_V1):
    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        cfg = self._kv_transfer_config
        get = cfg.get_from_extra_config
        self.store_path = get("store", None)
        if not self.store_path:
            raise ValueError("UcmConnector: kv_connector_extra_config needs 'store' (a ucm store directory)")
        self.do_save = bool(get("save", cfg.kv_role in ("kv_both", "kv_producer")))
        self._save_cfg = self.do_save   # as configured: TP ranks take part in saves by this, not by do_save
        self.do_load = bool(get("load", True))
        mc = vllm_config.model_config
        pc = vllm_config.parallel_config
        self.engine_block = int(vllm_config.cache_config.block_size)
        self.dtype = dtypes.from_torch(mc.dtype)
        if self.dtype is None:
            raise ValueError(f"UcmConnector: model dtype {mc.dtype} has no ucm namespace dtype (bf16, fp16, fp32)")
        self.num_layers = mc.get_num_layers(pc)
        self.total_kv_heads = mc.get_total_num_kv_heads()
        self.head_dim = mc.get_head_size()
        self.tp_size = pc.tensor_parallel_size
        self.dp_rank = int(getattr(pc, "data_parallel_rank", 0) or 0)
        self.model_dir = model_dir_of(get("model_dir", None), mc.model)
        self._refuse_unsupported(vllm_config, kv_cache_config)
        self.shard = None
        self.store = self._open_store(role, int(get("io_threads", 8)), get("shard", None))
        self.ns = self._resolve_namespace(get("namespace", None))
        self.T = self.ns.block_size
        self._adapters: Dict[tuple, dict] = {}        # (lora_name, lora_path) -> desc, id (lora.py)
        # KV events: only when vLLM publishes them (else nothing is collected)
        self._events_on = events.enabled(vllm_config)
        self.event_medium = ucm.event_medium(self.store_path) if self._events_on else None
        if role == KVConnectorRole.SCHEDULER:
            self._recompute_on_failure(cfg)
            self.planner = Planner(self.engine_block, self.T, self._hashes, self._lookup, load=self.do_load,
                                   save=self.do_save, log=lambda m: log.warning("UcmConnector: %s", m),
                                   load_tokens=self._events_on)
            self.sched_stats = {"store_errors": 0}
            self._sched_events: list = []         # from the workers, until take_events
            self._announced = events.Announced() if self._events_on else None
        else:
            self._kv: Dict[int, torch.Tensor] = {}
            self._isa: Dict[int, str] = {}
            self._gpu: Optional[Dict[int, Any]] = None  # layer -> gpu_layout.GpuLayout (CUDA caches)
            self._errors: set = set()
            self._validity = BlockValidity(self.engine_block)
            q_bytes = int(get("save_queue_bytes", 512 << 20))
            self._saves = SaveQueue(self._dump, q_bytes, on_error=self._dump_failed) if self.do_save else None
            self._reprs_of: Dict[bytes, Any] = {}     # namespace id -> (repr info, projection) or None
            self._closed = False
            self._tp_rank = 0
            self._event_buf = events.EventBuffer() if self._events_on else None
            self._root = ucm.hash_root(self.ns.hash_seed) if self._events_on else None
            self.stats = {k: 0 for k in _COUNTERS}
            self.stats["load_seconds"] = 0.0
            # Fault injection for tests/vllm: before the first step with a load (with
            # test_pause_on "resumed": a load of a request resuming after a preemption), write
            # FILE.waiting and wait (at most 300 s) until FILE exists, so a test can act between
            # lookup and load.
            self._pause_file = get("test_pause_before_load", None)
            self._pause_on = get("test_pause_on", "any")
        log.info("UcmConnector (%s): store %s, namespace %s, ucm block %d, engine block %d, save %s%s, load %s",
                 role.name, self.store_path, self.ns.name, self.T, self.engine_block, self.do_save,
                 f" (shard {self.shard})" if self.shard else "", self.do_load)

    def _recompute_on_failure(self, cfg) -> None:
        """A block that cannot be loaded (corrupt, removed by gc, unreadable) must cost a recompute,
        never a failed request: vLLM's default kv_load_failure_policy "fail" would fail every
        request sharing it. The scheduler reads the policy right after creating this connector
        (vLLM 0.32 Scheduler.__init__), so setting it here takes effect."""
        policy = getattr(cfg, "kv_load_failure_policy", "recompute")
        if policy != "recompute":
            cfg.kv_load_failure_policy = "recompute"
            log.info("UcmConnector: kv_load_failure_policy %r set to 'recompute': a store block that cannot be "
                     "loaded is recomputed by vLLM, and a request that read KV that is not good is rolled back "
                     "and recomputed, instead of failing (docs/vllm.md)", policy)

    def _refuse_unsupported(self, vllm_config, kv_cache_config) -> None:
        """Engines whose KV the connector would get wrong are refused at startup, with the reason."""
        mc = vllm_config.model_config
        sw = mc.get_sliding_window() if hasattr(mc, "get_sliding_window") else None
        if sw:
            raise ValueError(f"UcmConnector: model {mc.model} uses sliding-window attention (window {sw} tokens): "
                             "vLLM frees blocks that leave the window during a chunked prefill, so a prompt's "
                             "blocks cannot be saved whole, and a store block outside the window is never read. "
                             "ucm does not serve sliding-window models; remove the kv_transfer_config")
        groups = getattr(kv_cache_config, "kv_cache_groups", None) if kv_cache_config is not None else None
        if groups is not None and len(groups) > 1:
            raise ValueError(f"UcmConnector: the engine has {len(groups)} KV cache groups (a hybrid or "
                             "sliding-window model); ucm serves models with one full-attention group only")

    def _open_store(self, role, io_threads: int, shard: Optional[str]):
        """The scheduler (and a worker that does not save) reads; a saving worker writes its own
        writer shard (store_v1.md §11): `shard` from the extra config, else $UCM_SHARD, else
        vllm-<host>[-dp<rank>], with -2, -3, ... when another live process holds that name. A
        single-writer store that another process writes is served read-only, saving off."""
        self._io_threads = io_threads
        exists = os.path.exists(os.path.join(self.store_path, "UCMSTORE"))
        writer = self.do_save and role == KVConnectorRole.WORKER and not self._replica_without_heads()
        if not writer:
            return ucm.Store(self.store_path, mode="r", io_threads=io_threads, refresh_interval_ms=200) if exists else None
        base = shard or os.environ.get("UCM_SHARD") or self._default_shard()
        last = None
        for i in range(1, 9):
            name = base if i == 1 else f"{base}-{i}"
            try:
                st = ucm.Store(self.store_path, mode="c", io_threads=io_threads, shard=name)
                self.shard = name
                return st
            except ucm.Busy as e:
                last = e
        log.warning("UcmConnector: store %s: no writer shard free (%s); this worker serves from the store but does "
                    "not save. A single-writer store has one writer: `ucm migrate %s --to-sharded` lets several "
                    "servers save to it", self.store_path, last, self.store_path)
        self.do_save = False
        return ucm.Store(self.store_path, mode="r", io_threads=io_threads, refresh_interval_ms=200)

    def _default_shard(self) -> str:
        host = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname()).lstrip(".") or "host"
        name = f"vllm-{host}" + (f"-dp{self.dp_rank}" if self.dp_rank else "")
        return name[:60]

    def _replica_without_heads(self) -> bool:
        """TP ranks other than 0 of a TP group do not write: rank 0 gathers the heads and writes."""
        if self.tp_size <= 1:
            return False
        try:
            from vllm.distributed.parallel_state import get_tensor_model_parallel_rank
            return get_tensor_model_parallel_rank() != 0
        except Exception:
            return False

    # ------------------------------------------------------------------ startup checks
    def _engine_desc(self) -> dict:
        """The namespace descriptor of this engine's model in its KV dtype, from libucm (the one
        owner: ucm_model_fingerprint); refused when vLLM's geometry is not config.json's."""
        d = descriptor(self.model_dir, dtype=self.dtype)
        eng = {"num_layers": self.num_layers, "num_kv_heads": self.total_kv_heads, "head_dim": self.head_dim}
        bad = [f"{k} {d[k]} (config.json) vs {v} (vLLM)" for k, v in eng.items() if int(d[k]) != int(v)]
        if bad:
            raise ValueError(f"UcmConnector: {self.model_dir}: " + "; ".join(bad))
        return d

    def _resolve_namespace(self, name: Optional[str]) -> "ucm.Namespace":
        """The store namespace this engine reads and writes, by the rule of store_v1.md §7.3
        (libucm's ucm_store_namespace_match: model, weights digest, dtype, geometry, a block size
        dividing vLLM's); a saving worker creates it when none suits (ucm_store_namespace_create,
        as `ucm precompute` would). Refuses at startup, naming both fingerprints."""
        want = self._engine_desc()
        if self.store is None:  # a reader of a store that does not exist yet
            if not self.do_save:
                raise ValueError(f"UcmConnector: store {self.store_path} does not exist")
            for _ in range(1200):  # the worker creates it (it starts first)
                time.sleep(0.25)
                if os.path.exists(os.path.join(self.store_path, "UCMSTORE")):
                    break
            self.store = ucm.Store(self.store_path, mode="r", refresh_interval_ms=200)
        # Who saves without being the writer (the scheduler, TP ranks > 0) waits for the writer.
        waits = 1 if name or not self.do_save or self.shard is not None else 1200
        for attempt in range(waits):
            try:
                return self.store.match_namespace(want, self.engine_block, name)
            except ucm.NotFound as e:
                if name:
                    raise ValueError(f"UcmConnector: {e}") from None
                if self.shard is not None:  # the writer: create it
                    log.info("UcmConnector: %s; creating it", e)
                    return self.store.create_namespace(want)
                if attempt + 1 == waits:
                    raise ValueError(f"UcmConnector: {e}. Precompute this model into it (`ucm precompute "
                                     "--dtype ...`), or use another store") from None
                time.sleep(0.25)  # the worker is creating it
                self.store.refresh()
        raise AssertionError("unreachable")

    # ------------------------------------------------------------------ scheduler side
    def _adapter(self, key: tuple) -> dict:
        """The adapter namespace of (lora_name, lora_path): its descriptor and id (= its hash seed)."""
        a = self._adapters.get(key)
        if a is None:
            desc = adapter_desc(self.ns.desc, key[0], adapter_digest(key[1]))
            a = self._adapters[key] = {"desc": desc, "id": ucm.namespace_id(desc)}
        return a

    def _seed(self, key: Optional[tuple]) -> bytes:
        return self.ns.hash_seed if key is None else self._adapter(key)["id"]

    def _hashes(self, token_ids, key: Optional[tuple] = None) -> np.ndarray:
        return ucm.hash_blocks(self._seed(key), token_ids, self.T)

    def _lookup(self, hashes, key: Optional[tuple] = None):
        ns = self.ns if key is None else self._adapter(key)["id"]
        try:
            r = self.store.lookup(ns, hashes)
        except ucm.NotFound:           # an adapter whose namespace no server has written yet
            return 0, np.zeros(len(hashes), dtype=bool)
        return r.prefix_blocks, r.present

    def _ns(self, key: Optional[tuple], create: bool = False) -> "ucm.Namespace":
        """The namespace of a load or save: the base one, or an adapter's (created by a writer)."""
        if key is None:
            return self.ns
        a = self._adapter(key)
        ns = a.get("ns")
        if ns is None:
            try:
                ns = self.store.namespace(a["id"])
            except ucm.NotFound:
                if not create:
                    raise
                ns = self.store.register_namespace(a["desc"])
                log.info("UcmConnector: namespace %s registered for LoRA adapter %s (%s)", ns.name, key[0], key[1])
            a["ns"] = ns
        return ns

    def get_num_new_matched_tokens(self, request, num_computed_tokens: int):
        """Called for a new request and again for one resuming after preemption. A store error is a
        miss (logged), never an exception into vLLM's scheduler."""
        try:
            n = self.planner.matched(request.request_id, request.prompt_token_ids, num_computed_tokens,
                                     bypass=bypass_reason(request), ns_key=adapter_of(request))
        except Exception as e:
            self.sched_stats["store_errors"] += 1
            log.warning("UcmConnector: request %s: lookup failed (%s: %s); served as a miss", request.request_id,
                        type(e).__name__, e)
            n = 0
        return n, False

    def update_state_after_alloc(self, request, blocks, num_external_tokens: int):
        self.planner.allocated(request.request_id, num_external_tokens)

    def build_connector_meta(self, scheduler_output) -> KVConnectorMetadata:
        """This step's loads (new and resumed requests) and saves (prompts complete after it)."""
        try:
            loads, saves, steps = self.planner.plan(scheduler_output)
        except Exception as e:  # per-request errors are handled inside; this is a defect
            self.sched_stats["store_errors"] += 1
            log.error("UcmConnector: planning the step failed (%s: %s); the workers distrust every cached block "
                      "(each request reading one is recomputed) and nothing is loaded or saved this step",
                      type(e).__name__, e)
            return UcmMetadata(planned=False, finished=list(getattr(scheduler_output, "finished_req_ids", ())))
        return UcmMetadata(loads=loads, saves=saves, steps=steps, finished=list(scheduler_output.finished_req_ids))

    def request_finished(self, request, block_ids):
        self.planner.finished(request.request_id)
        return False, None

    def update_connector_output(self, connector_output):
        """Keeps the workers' KV events of the step (those every reporting worker gave)."""
        ev = getattr(connector_output, "kv_cache_events", None)
        if self._events_on and isinstance(ev, UcmKVEvents):
            self._sched_events.extend(ev.aggregate().get_all_events())

    def take_events(self):
        """The KV events since the last call, for vLLM's publisher (called once per step); and,
        every few seconds, BlockRemoved for blocks it announced that the store no longer holds."""
        if not self._events_on:
            return []
        out, self._sched_events = self._sched_events, []
        for e in out:
            if isinstance(e, BlockStored) and e.medium == self.event_medium:
                self._announced.add(e.block_hashes)
        try:
            gone = self._announced.check(lambda hs: self.store.lookup(self.ns, hs).present)
        except Exception as e:  # a store that fails: checked again next round
            self.sched_stats["store_errors"] += 1
            log.warning("UcmConnector: checking announced blocks failed (%s: %s)", type(e).__name__, e)
            gone = []
        if gone:
            out.append(BlockRemoved(block_hashes=gone, medium=self.event_medium))
        return out

    # ------------------------------------------------------------------ worker side
    def register_kv_caches(self, kv_caches: Dict[str, torch.Tensor]):
        """Checks every layer's KV cache (device, dtype, shape, strides) against the layouts this
        connector implements and refuses anything else here, at startup, naming what it found:
        writing a layout it does not know would corrupt other requests' blocks. CUDA caches: the
        layouts of vLLM 0.32's CUDA backends (gpu_layout.py)."""
        if any(kv.device.type == "cuda" for kv in kv_caches.values()):
            from . import gpu_layout
            self._gpu = {}
        for name, kv in kv_caches.items():
            l = _layer_index(name)
            self._kv[l] = kv
            if self._gpu is not None:
                self._gpu[l] = gpu_layout.describe(kv, self.engine_block, self.head_dim, dtypes.to_torch(self.ns.dtype),
                                                   name=name)
                continue
            if kv.device.type != "cpu":
                raise ValueError(f"UcmConnector: KV cache {name} is on {kv.device} with shape {tuple(kv.shape)}, "
                                 f"strides {kv.stride()}, dtype {kv.dtype}: this connector implements vLLM's CPU "
                                 "layout ([blocks, heads, block_size, 2 * head_dim]) and vLLM 0.32's CUDA layouts; "
                                 "it refuses other devices and layouts rather than write blocks it cannot place "
                                 "(docs/vllm.md)")
            from vllm.v1.attention.backends.cpu_attn import _get_attn_isa
            if kv.dim() != 4 or kv.shape[2] != self.engine_block or kv.shape[3] != 2 * self.head_dim \
                    or not kv.is_contiguous():
                raise ValueError(f"UcmConnector: KV cache {name} has shape {tuple(kv.shape)}, strides {kv.stride()}; "
                                 f"expected a contiguous [blocks, heads, {self.engine_block}, {2 * self.head_dim}] "
                                 "(vLLM's CPU layout)")
            self._isa[l] = _get_attn_isa(kv.dtype, self.engine_block, self.head_dim)
        if sorted(self._kv) != list(range(self.num_layers)):
            raise ValueError(f"UcmConnector: KV caches for layers {sorted(self._kv)}, expected 0..{self.num_layers - 1}")
        first = self._kv[0]
        if first.dtype != dtypes.to_torch(self.ns.dtype):
            raise ValueError(f"UcmConnector: the engine's KV cache is {first.dtype}, namespace {self.ns.name} holds "
                             f"{self.ns.dtype}")
        tp_rank = 0
        if self.tp_size > 1:
            from vllm.distributed.parallel_state import get_tensor_model_parallel_rank
            tp_rank = get_tensor_model_parallel_rank()
        self._tp_rank = tp_rank
        self.heads = head_range(self.total_kv_heads, self.tp_size, tp_rank, first.shape[1])

    def _slots(self, block_ids: List[int], n_tokens: int) -> torch.Tensor:
        eb = self.engine_block
        b = torch.tensor(block_ids[:(n_tokens + eb - 1) // eb], dtype=torch.int64)
        return (b[:, None] * eb + torch.arange(eb)[None]).flatten()[:n_tokens]

    def start_load_kv(self, forward_context, **kwargs):
        """Loads this step's hits, then replays the step in the block validity tracker
        (validity.py). Nothing raises into vLLM: a block that cannot be loaded (missing, removed
        by gc since the lookup, corrupt, the store failing) is left holding no good KV, and every
        request that reads KV that is not good (the loader itself, a request sharing its blocks
        through vLLM's prefix cache) is reported with get_block_ids_with_load_errors: vLLM
        truncates it at that block, discards the step's output for it and recomputes."""
        meta = self._get_connector_metadata()
        if meta.loads and self._pause_file and (self._pause_on != "resumed" or any(ld.resumed for ld in meta.loads)):
            self._pause_before_load(meta.loads)
        good = []
        for ld in meta.loads:
            try:
                good.append(self._load(ld))
            except Exception as e:
                self.stats["store_errors"] += 1
                self._log_failed_load(ld, ld.first_token // self.T, f"{type(e).__name__}: {e}", "EXCEPTION")
                good.append(0)
        if self.tp_size > 1 and meta.loads:   # every rank keeps what every rank loaded (same state)
            good = self._tp_min(good)
        try:
            self._replay(meta, good)
        except Exception as e:  # a defect: same inputs on every rank, so every rank stops saving alike
            log.error("UcmConnector: tracking block validity failed (%s: %s); this worker no longer saves",
                      type(e).__name__, e)
            self._validity = None
        if self._event_buf is not None and meta.loads:
            self._report_loads(meta.loads, good)

    def _replay(self, meta: UcmMetadata, good: List[int]) -> None:
        v = self._validity
        if v is None:
            return
        if not meta.planned:
            log.error("UcmConnector: the scheduler could not describe a step; this worker no longer saves (it "
                      "cannot tell which blocks hold good KV)")
            self._validity = None
            return
        v.begin_step(meta.steps)
        for ld, g in zip(meta.loads, good):
            v.loaded(ld.block_ids, ld.first_token, ld.n_tokens, g * self.T)
        for rid, block in v.compute(meta.steps).items():
            if block < 0:   # a defect: the tracker lacks a block of the request's table
                log.error("UcmConnector: request %s read KV the connector cannot place (its block table is "
                          "incomplete); not reported", rid)
                continue
            self.stats["bad_reads_reported"] += 1
            self._errors.add(block)
            log.warning("UcmConnector: request %s read engine block %d, which holds no good KV (a failed load); "
                        "reported to vLLM, which recomputes the request from that block", rid, block)
        for rid in meta.finished:
            v.forget(rid)

    def _pause_before_load(self, loads: List[LoadSpec]) -> None:
        """Tests only: FILE.waiting gets, per load of this step, the request, whether it resumes and
        the hashes (32 hex) of the blocks it loads; then waits (at most 300 s) for FILE."""
        path, self._pause_file = self._pause_file, None
        import json
        with open(path + ".waiting", "w") as f:
            json.dump([{"req": ld.req_id, "resumed": ld.resumed,
                        "hashes": [h.tobytes().hex() for h in ld.hashes[ld.first_token // self.T:]]}
                       for ld in loads if ld.hashes is not None], f)
        deadline = time.time() + 300
        while not os.path.exists(path) and time.time() < deadline:
            time.sleep(0.05)

    def _log_failed_load(self, ld: LoadSpec, ucm_index: int, why: str, code: str) -> None:
        self.stats["load_errors"] += 1
        key = metrics.ERROR_PREFIX + code
        self.stats[key] = self.stats.get(key, 0) + 1
        h = ld.hashes[ucm_index].tobytes().hex() if ld.hashes is not None and ucm_index < len(ld.hashes) else "-"
        log.warning("UcmConnector: request %s: ucm block %d (hash %s) of its prompt failed to load (%s); its engine "
                    "blocks from %d hold no good KV", ld.req_id, ucm_index, h, why, ucm_index * self.T // self.engine_block)

    def _load(self, ld: LoadSpec) -> int:
        """Loads ld; returns the ucm blocks (from ld.first_token) loaded before the first failure."""
        t0 = time.perf_counter()
        first = ld.first_token // self.T                          # ucm blocks vLLM already holds
        if ld.hashes is None:                                     # accepted, but not loadable
            self._log_failed_load(ld, first, "the scheduler could not plan it", "UNPLANNED")
            return 0
        n = len(ld.hashes) - first
        h0, h1 = self.heads
        ns = self._ns(ld.ns_key)
        shape = (n,) + ns.payload_shape((h0, h1))               # [n][L][2][T][Hs][D]
        if self._gpu is not None:  # a device load into scratch pages, then a strided copy (gpu_layout.py)
            from . import gpu_layout
            L, kv0 = self.num_layers, self._kv[0]
            good, status = gpu_layout.load(self.store, ns, ld.hashes[first:], [self._kv[l] for l in range(L)],
                                           [self._gpu[l] for l in range(L)], ld.block_ids, ld.first_token,
                                           self.engine_block, (h0, h1), self.total_kv_heads,
                                           stream=torch.cuda.current_stream(kv0.device).cuda_stream,
                                           device=kv0.device.index or 0)
            bad = [good] if good < n else []
            n_tok = 0
        else:
            staging = torch.empty(shape, dtype=dtypes.to_torch(ns.dtype))
            status = self.store.load(ns, ld.hashes[first:], staging,
                                     heads=(h0, h1) if (h0, h1) != (0, self.total_kv_heads) else None)
            bad = np.flatnonzero(status != 0)
            good = int(bad[0]) if len(bad) else n                    # blocks before the first failure
            n_tok = good * self.T
        if n_tok:
            from .cpu_cache import write
            slots = self._slots(ld.block_ids, ld.first_token + n_tok)[ld.first_token:]
            hs, d = h1 - h0, self.head_dim
            for l in range(self.num_layers):
                k = staging[:good, l, 0].reshape(n_tok, hs, d)
                v = staging[:good, l, 1].reshape(n_tok, hs, d)
                write(self._kv[l], k, v, slots, self._isa[l])
        if len(bad):
            code = ucm.code_name(int(status[good]))
            self._log_failed_load(ld, first + good, code, code)
        dt = time.perf_counter() - t0
        self.stats["loaded_blocks"] += good
        self.stats["loaded_bytes"] += good * ns.block_bytes((h0, h1))
        self.stats["load_seconds"] += dt
        self._record({"event": "load", "req": ld.req_id, "blocks": good, "failed": int(n - good),
                      "bytes": good * ns.block_bytes((h0, h1)), "seconds": dt})
        return good

    # ------------------------------------------------------------------ KV events (connector_events.py)
    def _report(self, req_id: str, what: str, make_runs) -> None:
        """Adds BlockStored events of make_runs(); an error is logged, never raised (into vLLM's
        step or the save thread): the events are lost, the load or save stands."""
        try:
            self._event_buf.add([BlockStored(block_hashes=r.block_hashes, parent_block_hash=r.parent_block_hash,
                                             token_ids=r.token_ids, block_size=self.T, lora_id=None,
                                             medium=self.event_medium, lora_name=None) for r in make_runs()])
        except Exception as e:
            log.warning("UcmConnector: request %s: the KV events of its %s were not reported (%s: %s)", req_id, what,
                        type(e).__name__, e)

    def _report_loads(self, loads: List[LoadSpec], good: List[int]) -> None:
        """Reuse reports of the blocks vLLM keeps from this step's loads (good: ucm blocks loaded
        from first_token, the minimum over TP ranks; vLLM keeps whole engine blocks), by rank 0."""
        if self._tp_rank != 0:
            return
        for ld, g in zip(loads, good):
            first = ld.first_token // self.T
            k = ((first + g) * self.T // self.engine_block * self.engine_block - ld.first_token) // self.T
            if k <= 0 or ld.hashes is None or ld.ns_key is not None:  # (adapter chains: not reported)
                continue
            parent = ld.hashes[first - 1].tobytes() if first > 0 else None
            toks = ld.tokens[:k * self.T] if ld.tokens is not None else None
            self._report(ld.req_id, "load", lambda: events.block_runs(ld.hashes[first:first + k], parent, None, toks,
                                                                      self.T))

    def _tp_min(self, values: List[int]) -> List[int]:
        """The minimum of each value over the TP ranks (every rank calls it with the same length)."""
        from vllm.distributed.parallel_state import get_tp_group
        x = torch.tensor([[float(v) for v in values]], dtype=torch.float32)  # (CPU shm all_gather: no ints)
        got = get_tp_group().all_gather(x.to(self._kv[0].device), dim=0)     # [tp][n]
        return [int(v) for v in got.amin(dim=0).tolist()]

    def get_kv_connector_kv_cache_events(self):
        """This worker's KV events since the last step (None when there are none, and on TP ranks
        other than 0, which report nothing)."""
        buf = getattr(self, "_event_buf", None)
        if buf is None:
            return None
        evs = buf.drain()
        if not evs:
            return None
        out = UcmKVEvents(num_workers=1)
        out.add_events(evs)
        return out

    def wait_for_layer_load(self, layer_name: str):
        return  # loads are finished in start_load_kv (synchronous: before the forward)

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        return  # saved in wait_for_save, once every layer of the step is written

    def wait_for_save(self):
        """Copies out the blocks of prompts complete after this step and queues their dumps, each
        cut at the first token that does not hold good KV (validity.py: a request that read KV
        that was not good has been reported, and its rollback re-arms its save). Every TP rank
        cuts the same saves (same validity state), so all take part in the same gathers."""
        if not self.has_connector_metadata() or not self._save_cfg:
            return
        meta = self._get_connector_metadata()
        if not meta.saves:
            return
        for sv in meta.saves:
            sv = self._cut_at_bad_kv(sv)
            if sv is None:
                continue
            try:
                self._copy_out(sv)
            except Exception as e:
                self.stats["store_errors"] += 1
                log.warning("UcmConnector: request %s: copying its blocks out failed (%s: %s); not saved", sv.req_id,
                            type(e).__name__, e)

    def _cut_at_bad_kv(self, sv: SaveSpec) -> Optional[SaveSpec]:
        """sv without the blocks from the first token that does not hold good KV (None: nothing left)."""
        n_full = len(sv.hashes)
        if self._validity is None:
            return None
        ok = self._validity.good_prefix(sv.block_ids, n_full * self.T) // self.T
        if ok >= n_full:
            return sv
        self.stats["saves_cut_at_bad_kv"] += 1
        log.warning("UcmConnector: request %s: its blocks from ucm block %d do not hold good KV (a failed load "
                    "upstream); %s", sv.req_id, ok, "not saved" if ok <= sv.first else f"saved up to block {ok}")
        if ok <= sv.first:
            return None
        keep = (ok - sv.first) * self.T
        return SaveSpec(sv.req_id, sv.hashes[:ok], sv.first, sv.block_ids,
                        sv.tokens[:keep] if sv.tokens is not None else None)

    def _copy_out(self, sv: SaveSpec):
        """Copies the blocks out of the cache (the only part a step waits for) and queues the dump.
        Tensor parallel: every rank copies its heads out and TP rank 0 gathers all the heads (a
        store block holds every KV head) and writes; the other ranks only take part."""
        n_full, first = len(sv.hashes), sv.first
        n = n_full - first
        nbytes = n * self.ns.block_bytes()
        writer = self.do_save and self.shard is not None
        if self.tp_size == 1 and (not writer or not self._saves.has_room(nbytes)):  # (TP ranks all take part)
            if writer:
                self._drop(sv, n)
            return
        local = self._read_local(sv)
        if self.tp_size > 1:  # every rank calls the same collectives, whatever failed where
            ok = self._tp_min([0 if local is None else 1])[0]
            if not ok:
                log.warning("UcmConnector: request %s: a TP rank could not copy its heads out; not saved", sv.req_id)
                return
        elif local is None:
            return
        payload = local if self.tp_size == 1 else self._gather_heads(local)
        if payload is None or not writer:
            return
        try:
            ns = self._ns(sv.ns_key, create=True)
        except Exception as e:
            self.stats["store_errors"] += 1
            log.warning("UcmConnector: request %s: no namespace for LoRA adapter %s (%s: %s); not saved", sv.req_id,
                        sv.ns_key, type(e).__name__, e)
            return
        parents = ucm.parents_of(ns.hash_seed, sv.hashes)[first:]
        if not self._saves.offer((sv.req_id, sv.hashes[first:], parents, payload, sv.tokens, ns), nbytes):
            self._drop(sv, n)

    def _read_local(self, sv: SaveSpec) -> Optional[torch.Tensor]:
        """This rank's heads of ucm blocks [first, n_full) of sv, [n][L][2][T][Hs][D]; None (logged,
        counted) when the copy fails."""
        n_full, first = len(sv.hashes), sv.first
        n = n_full - first
        L, D, T, eb = self.num_layers, self.head_dim, self.T, self.engine_block
        h0, h1 = self.heads
        tok0, tok1 = first * T, n_full * T
        e0, e1 = tok0 // eb, (tok1 + eb - 1) // eb
        try:
            blocks = torch.tensor(sv.block_ids[e0:e1], dtype=torch.int64)
            local = torch.empty((n, L, 2, T, h1 - h0, D), dtype=dtypes.to_torch(self.ns.dtype))
            off = tok0 - e0 * eb
            if self._gpu is not None:  # gathered through the K/V views on the device, one copy per layer
                from . import gpu_layout
                gpu_layout.read([self._kv[l] for l in range(L)], [self._gpu[l] for l in range(L)], sv.block_ids,
                                tok0, tok1, eb, T, local)
            else:
                from .cpu_cache import read_blocks
                for l in range(L):
                    k, v = read_blocks(self._kv[l], blocks, self._isa[l])          # [nb, eb, Hs, D]
                    local[:, l, 0] = k.reshape(-1, h1 - h0, D)[off: off + tok1 - tok0].reshape(n, T, h1 - h0, D)
                    local[:, l, 1] = v.reshape(-1, h1 - h0, D)[off: off + tok1 - tok0].reshape(n, T, h1 - h0, D)
            return local
        except Exception as e:
            self.stats["store_errors"] += 1
            log.warning("UcmConnector: request %s: copying its blocks out failed (%s: %s); not saved", sv.req_id,
                        type(e).__name__, e)
            return None

    def _gather_heads(self, local: torch.Tensor) -> Optional[torch.Tensor]:
        """All ranks' head slices [n][L][2][T][Hs][D] -> TP rank 0 gets [n][L][2][T][H][D] (a head
        replicated on several ranks is taken from the first); other ranks get None."""
        from vllm.distributed.parallel_state import get_tensor_model_parallel_rank, get_tp_group
        parts = get_tp_group().all_gather(local.unsqueeze(0).contiguous().to(self._kv[0].device), dim=0).cpu()
        # [tp][n][L][2][T][Hs][D]; a GPU worker's TP group gathers device tensors (NCCL)
        if get_tensor_model_parallel_rank() != 0:
            return None
        full = torch.empty(local.shape[:4] + (self.total_kv_heads, self.head_dim), dtype=local.dtype)
        for r in range(self.tp_size - 1, -1, -1):
            a, b = head_range(self.total_kv_heads, self.tp_size, r, local.shape[4])
            full[:, :, :, :, a:b] = parts[r]
        return full

    def _drop(self, sv: SaveSpec, n: int) -> None:
        self.stats["saves_dropped"] += 1
        log.warning("UcmConnector: request %s: save of %d blocks dropped, the save queue is full (%d of %d bytes "
                    "queued; the disk is slower than the saves)", sv.req_id, n, self._saves.queued_bytes,
                    self._saves.max_bytes)

    def _dump(self, item) -> None:
        req_id, hashes, parents, payload, tokens, ns = item
        reprs = self._reprs(payload, ns)
        st = self.store.dump(ns, hashes, parents, payload, reprs=reprs, tokens=tokens)
        ok = int((st == 0).sum())
        self.stats["saved_blocks"] += ok
        self.stats["saved_bytes"] += ok * self.ns.block_bytes()
        self._record({"event": "save", "req": req_id, "blocks": ok, "failed": int(len(st) - ok)})
        if self._event_buf is not None and ok and ns is self.ns:  # the runs of blocks this dump stored
            p0 = parents[0].tobytes()
            self._report(req_id, "save", lambda: events.block_runs(hashes, None if p0 == self._root else p0, st == 0,
                                                                   tokens, self.T))
        if ok != len(st):
            log.warning("UcmConnector: request %s: %d of %d blocks not saved (%s)", req_id, len(st) - ok,
                        len(st), sorted({ucm.code_name(int(c)) for c in st if c}))

    def _dump_failed(self, item, e: BaseException) -> None:
        self.stats["store_errors"] += 1
        log.warning("UcmConnector: saving request %s failed (%s: %s); not saved", item[0], type(e).__name__, e)

    def _reprs(self, payload: torch.Tensor, ns: "ucm.Namespace"):
        """R0/R1/R4 of each block (ucm.repr_encode, precompute's code) when the namespace has them
        (an adapter's namespace has none)."""
        got = self._reprs_of.get(ns.id, 0)
        if got == 0:
            try:
                info = self.store.repr_info(ns)
                proj = np.frombuffer(self.store.attachment(ns, "r4_projection"), dtype=np.float32)
                got = (info, proj) if info.hash_bits else None
            except ucm.Error:
                got = None
            self._reprs_of[ns.id] = got
        if got is None:
            return None
        keys = payload[:, :, 0].float().numpy()                       # [n][L][T][H][D]
        return [ucm.repr_encode(got[0], keys[i], got[1]) for i in range(len(keys))]

    def flush(self, timeout: float = 120.0) -> bool:
        """Waits until every queued save is durable, at most timeout seconds (tests, shutdown)."""
        q = getattr(self, "_saves", None)
        return q.flush(timeout) if q is not None else True

    def _record(self, event: dict) -> None:
        """Appends one JSON line per load / save to $UCM_VLLM_STATS (tests, scripts/bench_vllm.py)."""
        path = os.environ.get("UCM_VLLM_STATS")
        if path:
            import json
            with open(path, "a") as f:
                f.write(json.dumps(event) + "\n")

    def get_kv_connector_stats(self):
        """The counts since the last call (ucm/vllm/metrics.py): a worker's loads, saves and errors
        with its save queue's bytes, or the scheduler's lookups and hit tokens; None when nothing
        happened. vLLM sums them and exports them (`ucm_*` on /metrics)."""
        if hasattr(self, "planner"):
            now = {"lookups": self.planner.counters["lookups"], "hit_tokens": self.planner.counters["hit_tokens"],
                   "store_errors": self.sched_stats["store_errors"]}
        elif hasattr(self, "stats"):
            now = dict(self.stats)
        else:
            return None
        d = metrics.delta(now, getattr(self, "_reported", {}))
        self._reported = now
        q = getattr(self, "_saves", None)
        if q is not None and (d or q.queued_bytes):
            d["save_queue_bytes"] = q.queued_bytes
        return metrics.UcmConnectorStats(data=d) if d else None

    @classmethod
    def build_kv_connector_stats(cls, data=None):
        return metrics.UcmConnectorStats(data=dict(data or {}))

    @classmethod
    def build_prom_metrics(cls, vllm_config, metric_types, labelnames, per_engine_labelvalues):
        return metrics.UcmPromMetrics(vllm_config, metric_types, labelnames, per_engine_labelvalues)

    def get_block_ids_with_load_errors(self) -> set:
        errs, self._errors = self._errors, set()
        return errs

    def shutdown(self):
        """Finishes queued saves (at most `shutdown_drain_s`, default 60 s), drops the rest, joins
        the save thread, then closes the store. Idempotent."""
        if getattr(self, "_closed", False):
            return
        self._closed = True
        joined = True
        q = getattr(self, "_saves", None)
        if q is not None:
            joined = q.close(float(self._kv_transfer_config.get_from_extra_config("shutdown_drain_s", 60)))
            self.stats["saves_dropped"] += q.counters["dropped_at_close"]
        if hasattr(self, "stats"):
            log.info("UcmConnector stats: %s", self.stats)
        if getattr(self, "_event_buf", None) is not None and self._event_buf.dropped:
            log.warning("UcmConnector: %d KV events dropped (more than %d waited for an engine step)",
                        self._event_buf.dropped, self._event_buf.max_events)
        if hasattr(self, "planner"):
            log.info("UcmConnector scheduler: %s, store errors %d", self.planner.counters, self.sched_stats["store_errors"])
        if self.store is not None and joined:
            self.store.close()
        elif not joined:
            log.warning("UcmConnector: a save still runs after the drain; the store is left open")

