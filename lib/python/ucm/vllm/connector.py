"""UcmConnector: vLLM (v1 KV connector API) serving prompts from a ucm store (docs/vllm.md).

Configured by ``KVTransferConfig(kv_connector="UcmConnector",
kv_connector_module_path="ucm.vllm.connector", kv_role="kv_both", kv_connector_extra_config={...},
kv_load_failure_policy="recompute")``; the extra config keys:

  store       the store directory (required)
  namespace   name or id; default: the namespace whose fingerprint matches the engine (model id,
              weights digest, dtype, layers, KV heads, head dim, a block size dividing vLLM's)
  io_threads  block I/O threads of the store handle (default 8)
  save        write the full blocks of new prompts (default: kv_role is kv_both or kv_producer)
  load        serve prompts from the store (default true)
  ucm_bin     the `ucm` binary, used once to create the namespace when `save` finds none (default
              $UCM_BIN, then `ucm` on PATH)

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
"""
from __future__ import annotations

import logging
import os
import queue
import re
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from vllm.distributed.kv_transfer.kv_connector.v1.base import (KVConnectorBase_V1, KVConnectorMetadata,
                                                                 KVConnectorRole)
from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorStats

import ucm
from ucm.model import fingerprint

log = logging.getLogger("ucm.vllm")
if not log.handlers:  # vLLM configures only its own loggers: the connector's lines go to stderr
    _h = logging.StreamHandler()
    _h.setFormatter(logging.Formatter("%(levelname)s %(asctime)s [ucm.vllm] %(message)s", "%m-%d %H:%M:%S"))
    log.addHandler(_h)
    log.setLevel(logging.INFO)
    log.propagate = False

_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
_TORCH = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


@dataclass
class LoadSpec:
    """Load tokens [first_token, n_tokens) of a prompt (whole engine blocks) into its blocks; the
    tokens before first_token are vLLM's own prefix-cache hit (shared blocks: never written)."""
    req_id: str
    hashes: np.ndarray          # uint8 [n_tokens / T][16], the prompt's ucm blocks up to n_tokens
    block_ids: List[int]        # engine blocks of the request, in order
    first_token: int
    n_tokens: int


@dataclass
class SaveSpec:
    """Copy out ucm blocks [first, last) of a prompt whose KV is complete after this step."""
    req_id: str
    hashes: np.ndarray          # uint8 [last][16], the prompt's full ucm blocks
    first: int
    block_ids: List[int]


@dataclass
class UcmMetadata(KVConnectorMetadata):
    loads: List[LoadSpec] = field(default_factory=list)
    saves: List[SaveSpec] = field(default_factory=list)


_COUNTERS = ("loaded_blocks", "loaded_bytes", "load_seconds", "load_errors", "saved_blocks", "saved_bytes")


class UcmConnectorStats(KVConnectorStats):
    """The connector's counters since the last report, for vLLM's connector-stats logging (sums)."""

    def reset(self):
        self.data = {k: 0 for k in _COUNTERS}

    def aggregate(self, other):
        for k in _COUNTERS:
            self.data[k] = self.data.get(k, 0) + other.data.get(k, 0)
        return self

    def reduce(self):
        d = {k: self.data.get(k, 0) for k in _COUNTERS}
        d["load_GBps"] = d["loaded_bytes"] / d["load_seconds"] / 1e9 if d["load_seconds"] else 0.0
        return d

    def is_empty(self):
        return not any(self.data.get(k, 0) for k in _COUNTERS)


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
        self.do_load = bool(get("load", True))
        mc = vllm_config.model_config
        pc = vllm_config.parallel_config
        self.engine_block = int(vllm_config.cache_config.block_size)
        self.dtype = _DTYPES.get(mc.dtype)
        if self.dtype is None:
            raise ValueError(f"UcmConnector: model dtype {mc.dtype} has no ucm namespace dtype (bf16, fp16, fp32)")
        self.num_layers = mc.get_num_layers(pc)
        self.total_kv_heads = mc.get_total_num_kv_heads()
        self.head_dim = mc.get_head_size()
        self.tp_size = pc.tensor_parallel_size
        self.model_dir = mc.model
        # The worker writes (one writer per store); the scheduler only looks up, read-only.
        mode = "c" if self.do_save and role == KVConnectorRole.WORKER else "r"
        exists = os.path.exists(os.path.join(self.store_path, "UCMSTORE"))
        self.store = ucm.Store(self.store_path, mode=mode, io_threads=int(get("io_threads", 8)),
                               refresh_interval_ms=200 if mode == "r" else None) if (exists or mode == "c") else None
        self.ns = self._resolve_namespace(get("namespace", None), get("ucm_bin", None))
        self.T = self.ns.block_size
        if role == KVConnectorRole.SCHEDULER:
            self._pending_loads: Dict[str, Tuple[Any, int]] = {}
            self._prefill: Dict[str, dict] = {}   # requests whose prompt is being prefilled and saved
        else:
            self._kv: Dict[int, torch.Tensor] = {}
            self._isa: Dict[int, str] = {}
            self._errors: set = set()
            self._dumps: "queue.Queue" = queue.Queue()
            self._dump_thread: Optional[threading.Thread] = None
            self._proj: Optional[np.ndarray] = None
            self._info = None
            self.stats = {"loaded_blocks": 0, "load_errors": 0, "loaded_bytes": 0,
                          "load_seconds": 0.0, "saved_blocks": 0, "saved_bytes": 0}
        log.info("UcmConnector (%s): store %s, namespace %s, ucm block %d, engine block %d, save %s, load %s",
                 role.name, self.store_path, self.ns.name, self.T, self.engine_block, self.do_save, self.do_load)

    # ------------------------------------------------------------------ startup checks
    def _engine_fingerprint(self) -> dict:
        fp = fingerprint(self.model_dir)
        return {**fp, "dtype": self.dtype, "num_layers": self.num_layers, "num_kv_heads": self.total_kv_heads,
                "head_dim": self.head_dim}

    def _mismatch(self, desc: dict, eng: dict) -> List[str]:
        bad = [f"{k} {desc.get(k)!r} vs the engine's {eng[k]!r}" for k in
               ("model_id", "weights_digest", "dtype", "num_layers", "num_kv_heads", "head_dim") if desc.get(k) != eng[k]]
        bs = int(desc.get("block_size", 0))
        if bs <= 0 or self.engine_block % bs != 0:
            bad.append(f"block_size {bs} does not divide the engine's block size {self.engine_block}")
        return bad

    def _resolve_namespace(self, name: Optional[str], ucm_bin: Optional[str]) -> "ucm.Namespace":
        """The store namespace this engine reads and writes; refuses, at startup, a store whose
        namespaces were made by another model, dtype or geometry (naming both fingerprints)."""
        eng = self._engine_fingerprint()
        if self.store is None:  # a reader of a store that does not exist yet
            if not self.do_save:
                raise ValueError(f"UcmConnector: store {self.store_path} does not exist")
            for _ in range(1200):  # the worker creates it (it starts first)
                time.sleep(0.25)
                if os.path.exists(os.path.join(self.store_path, "UCMSTORE")):
                    break
            self.store = ucm.Store(self.store_path, mode="r", refresh_interval_ms=200)
        if name:
            ns = self.store.namespace(name)
            bad = self._mismatch(ns.desc, eng)
            if bad:
                raise ValueError(f"UcmConnector: namespace {ns.name} of {self.store_path} does not match this engine: "
                                 + "; ".join(bad) + f". Engine fingerprint: {eng}")
            return ns
        waits = 1200 if self.do_save and self._role == KVConnectorRole.SCHEDULER else 1
        for attempt in range(waits):
            listed = self.store.namespaces()
            for d in listed:
                if not self._mismatch(d, eng):
                    return self.store.namespace(d["id"])
            if attempt == 0 and self.do_save and self._role == KVConnectorRole.WORKER:
                return self._create_namespace(ucm_bin, eng)
            if waits > 1:  # the worker is creating it
                time.sleep(0.25)
                self.store.refresh()
        found = "; ".join(f"{d.get('name')}: model_id {d.get('model_id')!r}, weights_digest "
                          f"{d.get('weights_digest')!r}, dtype {d.get('dtype')}, block_size {d.get('block_size')}, "
                          f"layers {d.get('num_layers')}, kv heads {d.get('num_kv_heads')}, head_dim {d.get('head_dim')}"
                          for d in listed) or "none"
        raise ValueError(f"UcmConnector: store {self.store_path} has no namespace for this engine. Engine fingerprint: "
                         f"model_id {eng['model_id']!r}, weights_digest {eng['weights_digest']!r}, dtype "
                         f"{eng['dtype']}, layers {eng['num_layers']}, kv heads {eng['num_kv_heads']}, head_dim "
                         f"{eng['head_dim']}, block size dividing {self.engine_block}. Store namespaces: {found}. "
                         "Precompute this model into it (`ucm precompute --dtype ...`), or use another store")

    def _create_namespace(self, ucm_bin: Optional[str], eng: dict) -> "ucm.Namespace":
        """The namespace `ucm precompute` would register (same fingerprint, r4_projection), made by
        running it on an empty corpus, so online and offline blocks share one namespace."""
        ucm_bin = ucm_bin or os.environ.get("UCM_BIN") or shutil.which("ucm")
        if not ucm_bin:
            raise ValueError(f"UcmConnector: store {self.store_path} has no namespace for this engine and no `ucm` "
                             "binary was found to create it (set ucm_bin or $UCM_BIN)")
        self.store.close()
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl") as empty:
            p = subprocess.run([ucm_bin, "precompute", "--model", self.model_dir, "--corpus", empty.name,
                                "--store", self.store_path, "--dtype", self.dtype, "--json"],
                               capture_output=True, text=True)
        if p.returncode != 0:
            raise ValueError(f"UcmConnector: creating the namespace with {ucm_bin} precompute failed: {p.stderr[-2000:]}")
        import json
        name = json.loads(p.stdout)["namespace"]
        self.store = ucm.Store(self.store_path, mode="c")
        return self.store.namespace(name)

    # ------------------------------------------------------------------ scheduler side
    def _hashes(self, token_ids) -> np.ndarray:
        return ucm.hash_blocks(self.ns.hash_seed, token_ids, self.T)

    def get_num_new_matched_tokens(self, request, num_computed_tokens: int):
        if not self.do_load:
            return 0, False
        ids = request.prompt_token_ids
        hashes = self._hashes(ids)
        hit = self.store.lookup(self.ns, hashes).prefix_blocks if len(hashes) else 0
        eb = self.engine_block
        # Whole engine blocks, and at least one prompt token left to compute.
        matched = min(hit * self.T, (len(ids) - 1)) // eb * eb
        if matched <= num_computed_tokens:
            return 0, False
        return matched - num_computed_tokens, False

    def update_state_after_alloc(self, request, blocks, num_external_tokens: int):
        if num_external_tokens > 0:
            self._pending_loads[request.request_id] = (request, num_external_tokens)

    def build_connector_meta(self, scheduler_output) -> KVConnectorMetadata:
        meta = UcmMetadata()
        for new in scheduler_output.scheduled_new_reqs:
            block_ids = list(new.block_ids[0])
            ids = new.prompt_token_ids
            if new.req_id in self._pending_loads:
                req, n_ext = self._pending_loads.pop(new.req_id)
                n_tokens = new.num_computed_tokens  # local + external hit, whole engine blocks
                meta.loads.append(LoadSpec(new.req_id, self._hashes(ids[:n_tokens]), block_ids,
                                           n_tokens - n_ext, n_tokens))
            if self.do_save:
                self._prefill[new.req_id] = {"ids": list(ids), "blocks": block_ids,
                                             "done": new.num_computed_tokens}
        cached = scheduler_output.scheduled_cached_reqs
        for i, rid in enumerate(cached.req_ids):
            st = self._prefill.get(rid)
            if st is None:
                continue
            nb = cached.new_block_ids[i]
            if nb is not None:
                if rid in cached.resumed_req_ids:
                    st["blocks"] = list(nb[0])
                else:
                    st["blocks"].extend(nb[0])
        for rid, st in list(self._prefill.items()):
            n_sched = scheduler_output.num_scheduled_tokens.get(rid)
            if n_sched is None:
                continue
            st["done"] += n_sched
            if st["done"] >= len(st["ids"]):  # the prompt's KV is complete after this step
                del self._prefill[rid]
                hashes = self._hashes(st["ids"])
                if len(hashes) == 0:
                    continue
                present = self.store.lookup(self.ns, hashes).present
                missing = np.flatnonzero(~present)
                if len(missing):
                    meta.saves.append(SaveSpec(rid, hashes, int(missing[0]), st["blocks"]))
        for rid in scheduler_output.finished_req_ids:
            self._prefill.pop(rid, None)
        return meta

    def request_finished(self, request, block_ids):
        self._prefill.pop(request.request_id, None)
        self._pending_loads.pop(request.request_id, None)
        return False, None

    # ------------------------------------------------------------------ worker side
    def register_kv_caches(self, kv_caches: Dict[str, torch.Tensor]):
        from vllm.v1.attention.backends.cpu_attn import _get_attn_isa
        for name, kv in kv_caches.items():
            l = _layer_index(name)
            self._kv[l] = kv
            if kv.device.type == "cpu":
                if kv.dim() != 4 or kv.shape[2] != self.engine_block:
                    raise ValueError(f"UcmConnector: KV cache {name} has shape {tuple(kv.shape)}, expected "
                                     f"[blocks, heads, {self.engine_block}, 2 * head_dim] (vLLM's CPU layout)")
                self._isa[l] = _get_attn_isa(kv.dtype, self.engine_block, self.head_dim)
        if sorted(self._kv) != list(range(self.num_layers)):
            raise ValueError(f"UcmConnector: KV caches for layers {sorted(self._kv)}, expected 0..{self.num_layers - 1}")
        first = self._kv[0]
        if first.dtype != _TORCH[self.ns.dtype]:
            raise ValueError(f"UcmConnector: the engine's KV cache is {first.dtype}, namespace {self.ns.name} holds "
                             f"{self.ns.dtype}")
        self.heads = self._head_range(first)

    def _head_range(self, kv: torch.Tensor) -> Tuple[int, int]:
        local = kv.shape[1] if kv.device.type == "cpu" else kv.shape[-2]
        if local == self.total_kv_heads:
            return (0, local)
        from vllm.distributed.parallel_state import get_tensor_model_parallel_rank
        r = get_tensor_model_parallel_rank()
        return (r * local, (r + 1) * local)

    def _slots(self, block_ids: List[int], n_tokens: int) -> torch.Tensor:
        eb = self.engine_block
        b = torch.tensor(block_ids[:(n_tokens + eb - 1) // eb], dtype=torch.int64)
        return (b[:, None] * eb + torch.arange(eb)[None]).flatten()[:n_tokens]

    def start_load_kv(self, forward_context, **kwargs):
        meta = self._get_connector_metadata()
        for ld in meta.loads:
            self._load(ld)

    def _load(self, ld: LoadSpec):
        t0 = time.perf_counter()
        first = ld.first_token // self.T                          # ucm blocks vLLM already holds
        n = len(ld.hashes) - first
        h0, h1 = self.heads
        shape = (n,) + self.ns.payload_shape((h0, h1))          # [n][L][2][T][Hs][D]
        staging = torch.empty(shape, dtype=_TORCH[self.ns.dtype])
        status = self.store.load(self.ns, ld.hashes[first:], staging,
                                 heads=(h0, h1) if (h0, h1) != (0, self.total_kv_heads) else None)
        bad = np.flatnonzero(status != 0)
        good = int(bad[0]) if len(bad) else n                    # blocks before the first failure
        if len(bad):
            # vLLM recomputes from the engine block holding the first failed ucm block.
            eb_index = ((first + good) * self.T) // self.engine_block
            self._errors.add(int(ld.block_ids[eb_index]))
            self.stats["load_errors"] += 1
            log.warning("UcmConnector: request %s: ucm block %d of %d failed to load (%s); reported as a load "
                        "error of engine block %d, vLLM recomputes from there", ld.req_id, first + good, first + n,
                        ucm.code_name(int(status[good])), ld.block_ids[eb_index])
        n_tok = good * self.T
        if n_tok:
            slots = self._slots(ld.block_ids, ld.first_token + n_tok)[ld.first_token:]
            hs, d = h1 - h0, self.head_dim
            for l in range(self.num_layers):
                k = staging[:good, l, 0].reshape(n_tok, hs, d)
                v = staging[:good, l, 1].reshape(n_tok, hs, d)
                kv = self._kv[l]
                if kv.device.type == "cpu":
                    from .cpu_cache import write
                    write(kv, k, v, slots, self._isa[l])
                else:  # GPU flash-attention layout [2, blocks, block_size, H, D] (not verified without a GPU)
                    flat = kv.view(2, -1, hs, d)
                    dev_slots = slots.to(kv.device)
                    flat[0].index_copy_(0, dev_slots, k.to(kv.device, non_blocking=True))
                    flat[1].index_copy_(0, dev_slots, v.to(kv.device, non_blocking=True))
        dt = time.perf_counter() - t0
        self.stats["loaded_blocks"] += good
        self.stats["loaded_bytes"] += good * self.ns.block_bytes((h0, h1))
        self.stats["load_seconds"] += dt
        self._record({"event": "load", "req": ld.req_id, "blocks": good, "failed": int(n - good),
                      "bytes": good * self.ns.block_bytes((h0, h1)), "seconds": dt})

    def wait_for_layer_load(self, layer_name: str):
        return  # loads are finished in start_load_kv (synchronous: before the forward)

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        return  # saved in wait_for_save, once every layer of the step is written

    def wait_for_save(self):
        if not self.has_connector_metadata():
            return
        meta = self._get_connector_metadata()
        for sv in meta.saves:
            self._copy_out(sv)

    def _copy_out(self, sv: SaveSpec):
        """Copies the blocks out of the cache (the only part a step waits for) and queues the dump."""
        if self.heads != (0, self.total_kv_heads):
            log.warning("UcmConnector: saving needs all KV heads (tensor parallel size 1); request %s not saved",
                        sv.req_id)
            return
        n_full = len(sv.hashes)
        first = sv.first
        eb, T = self.engine_block, self.T
        tok0, tok1 = first * T, n_full * T
        e0, e1 = tok0 // eb, (tok1 + eb - 1) // eb
        blocks = torch.tensor(sv.block_ids[e0:e1], dtype=torch.int64)
        L, H, D = self.num_layers, self.total_kv_heads, self.head_dim
        payload = torch.empty((n_full - first, L, 2, T, H, D), dtype=_TORCH[self.ns.dtype])
        off = tok0 - e0 * eb
        for l in range(L):
            kv = self._kv[l]
            if kv.device.type == "cpu":
                from .cpu_cache import read_blocks
                k, v = read_blocks(kv, blocks, self._isa[l])          # [nb, eb, H, D]
            else:
                k = kv[0][blocks].cpu()
                v = kv[1][blocks].cpu()
            k = k.reshape(-1, H, D)[off: off + tok1 - tok0]
            v = v.reshape(-1, H, D)[off: off + tok1 - tok0]
            payload[:, l, 0] = k.reshape(n_full - first, T, H, D)
            payload[:, l, 1] = v.reshape(n_full - first, T, H, D)
        parents = ucm.parents_of(self.ns.hash_seed, sv.hashes)[first:]
        self._dumps.put((sv.req_id, sv.hashes[first:], parents, payload))
        if self._dump_thread is None:
            self._dump_thread = threading.Thread(target=self._dump_loop, name="ucm-dump", daemon=True)
            self._dump_thread.start()
            import atexit
            atexit.register(self.flush)  # a worker that exits finishes its queued dumps first

    def _dump_loop(self):
        while True:
            item = self._dumps.get()
            if item is None:
                return
            req_id, hashes, parents, payload = item
            try:
                reprs = self._reprs(payload)
                st = self.store.dump(self.ns, hashes, parents, payload, reprs=reprs)
                ok = int((st == 0).sum())
                self.stats["saved_blocks"] += ok
                self.stats["saved_bytes"] += ok * self.ns.block_bytes()
                self._record({"event": "save", "req": req_id, "blocks": ok, "failed": int(len(st) - ok)})
                if ok != len(st):
                    log.warning("UcmConnector: request %s: %d of %d blocks not saved (%s)", req_id, len(st) - ok,
                                len(st), sorted({ucm.code_name(int(c)) for c in st if c}))
            except Exception as e:  # a save is best effort: the request itself is unaffected
                log.warning("UcmConnector: saving request %s failed: %s", req_id, e)
            finally:
                self._dumps.task_done()

    def _reprs(self, payload: torch.Tensor):
        """R0/R1/R4 of each block (ucm.repr_encode, precompute's code) when the namespace has them."""
        if self._info is None:
            try:
                self._info = self.store.repr_info(self.ns)
                self._proj = np.frombuffer(self.store.attachment(self.ns, "r4_projection"), dtype=np.float32)
            except ucm.Error:
                self._info = False
        if not self._info or not self._info.hash_bits:
            return None
        keys = payload[:, :, 0].float().numpy()                       # [n][L][T][H][D]
        return [ucm.repr_encode(self._info, keys[i], self._proj) for i in range(len(keys))]

    def flush(self, timeout: float = 120.0) -> None:
        """Waits until every queued dump is durable (tests, shutdown)."""
        if getattr(self, "_dumps", None) is not None:
            deadline = time.time() + timeout
            while self._dumps.unfinished_tasks and time.time() < deadline:
                time.sleep(0.05)

    def _record(self, event: dict) -> None:
        """Appends one JSON line per load / save to $UCM_VLLM_STATS (tests, scripts/bench_vllm.py)."""
        path = os.environ.get("UCM_VLLM_STATS")
        if path:
            import json
            with open(path, "a") as f:
                f.write(json.dumps(event) + "\n")

    def get_kv_connector_stats(self):
        """The counters since the last call (vLLM sums them per logging interval)."""
        st = getattr(self, "stats", None)
        if not st:
            return None
        last = getattr(self, "_reported", {k: 0 for k in _COUNTERS})
        delta = {k: st[k] - last.get(k, 0) for k in _COUNTERS}
        self._reported = {k: st[k] for k in _COUNTERS}
        out = UcmConnectorStats(data=delta)
        return None if out.is_empty() else out

    @classmethod
    def build_kv_connector_stats(cls, data=None):
        return UcmConnectorStats(data=dict(data or {k: 0 for k in _COUNTERS}))

    def get_block_ids_with_load_errors(self) -> set:
        errs, self._errors = self._errors, set()
        return errs

    def shutdown(self):
        if getattr(self, "_dumps", None) is not None:
            self.flush()
            self._dumps.put(None)
        log.info("UcmConnector stats: %s", getattr(self, "stats", {}))
        if self.store is not None:
            self.store.close()
