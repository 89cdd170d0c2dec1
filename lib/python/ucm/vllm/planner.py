"""The UcmConnector's scheduler side as plain Python: which blocks each step loads and saves.

No vLLM or torch import: tests/python/test_vllm_planner.py drives it with scheduler outputs built
the way vLLM 0.32's scheduler builds them (vllm/v1/core/sched/scheduler.py, output.py), preemption
and load-failure rollbacks included, and the connector (connector.py) is a thin layer over it.

What vLLM does, read in vLLM 0.32.0, and what the planner does about it:

* A request's prefix hit is asked for by get_num_new_matched_tokens whenever the request is
  scheduled from the waiting queue with nothing computed: when it is new, and again when it
  resumes after a preemption (vLLM freed its blocks and set num_computed_tokens to 0).
  update_state_after_alloc follows with the external token count vLLM accepted.
* The step's SchedulerOutput then carries the request either among scheduled_new_reqs (new; the
  V2 model runner also sends resumed requests there) or among scheduled_cached_reqs with its id in
  resumed_req_ids (V1 runner, the one on CPU) and new_block_ids = *all* its blocks. Both carry
  num_computed_tokens *before* the step (local prefix hit + external hit on the first step). A
  load is planned for either, into the block ids of this step.
* Save: a prompt's full ucm blocks are saved at the end of the step after which
  num_computed_tokens + num_scheduled_tokens >= len(prompt). The count is taken from vLLM each
  step, never accumulated here, so a preemption (counter back to 0) or a load-failure rollback
  (vLLM truncates num_computed_tokens at the first failed block) re-arms the save, which then
  fires only once the KV is recomputed.
* Whether what a save copies out is good KV is not decided here: the worker replays every step
  (the StepReq list of each step: who computes which tokens of which blocks) with the outcome of
  its loads in validity.BlockValidity, cuts saves at the first block that does not hold good KV,
  and reports requests that read such a block to vLLM, whose rollback re-arms their saves.
* A load vLLM accepted is always sent to the worker, even when it cannot be planned (its LoadSpec
  then has no hashes and the worker reports it failed): vLLM counts those tokens as computed.
* A LoRA request loads and saves in its adapter's namespace (lora.py; LoadSpec / SaveSpec
  ns_key). Requests whose KV vLLM keys by more than token ids and adapter (cache salt, prompt
  embeddings, multimodal inputs: bypass_reason) bypass the store, neither load nor save, and are
  counted.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .lora import adapter_of
from .validity import StepReq


@dataclass
class LoadSpec:
    """Load tokens [first_token, n_tokens) of a prompt (whole engine blocks) into its engine blocks;
    the tokens before first_token are vLLM's own prefix-cache hit (shared blocks: never written)."""
    req_id: str
    hashes: Optional[np.ndarray]  # uint8 [n_tokens / T][16], the prompt's ucm blocks up to n_tokens;
                                  # None: a load vLLM accepted that cannot be carried out (report it)
    block_ids: List[int]        # engine blocks of the request, in order
    first_token: int
    n_tokens: int
    tokens: Optional[np.ndarray] = None  # uint32 [n_tokens - first_token]: the loaded ids (KV events only)
    resumed: bool = False       # the request resumes after a preemption (tests' fault injection)
    ns_key: Optional[tuple] = None  # the namespace: None the base one, (lora_name, lora_path) an adapter's


@dataclass
class SaveSpec:
    """Copy out ucm blocks [first, len(hashes)) of a prompt whose KV is complete after this step."""
    req_id: str
    hashes: np.ndarray          # uint8 [n_full][16], the prompt's full ucm blocks
    first: int
    block_ids: List[int]
    tokens: Optional[np.ndarray] = None  # uint32 [(n_full - first) * T]: the saved blocks' token ids
    ns_key: Optional[tuple] = None  # as LoadSpec.ns_key


@dataclass
class _Req:
    ids: Sequence[int]          # prompt token ids (vLLM's list, not copied)
    ns_key: Optional[tuple] = None  # LoadSpec.ns_key
    blocks: List[int] = field(default_factory=list)
    saved: bool = False         # a save is planned for the current computation of the prompt


class Planner:
    """Scheduler-side state of the connector.

    engine_block: vLLM's block size (tokens); ucm_block: the namespace's block size, dividing it.
    hash_blocks(ids, ns_key) -> uint8 [len(ids) // ucm_block][16]: the chained block hashes in the
    namespace of ns_key (None: the base namespace; (lora_name, lora_path): that adapter's).
    lookup(hashes, ns_key) -> (prefix_blocks, present bool [n]): the store's index. May raise: the
    caller (the connector) turns that into a miss.
    Single-threaded (vLLM's scheduler calls it from one thread)."""

    def __init__(self, engine_block: int, ucm_block: int, hash_blocks: Callable, lookup: Callable, *,
                 load: bool = True, save: bool = False, log: Optional[Callable[[str], None]] = None,
                 load_tokens: bool = False):
        if engine_block % ucm_block:
            raise ValueError(f"ucm block size {ucm_block} does not divide the engine's block size {engine_block}")
        self.eb, self.T = engine_block, ucm_block
        self.hash_blocks, self.lookup = hash_blocks, lookup
        self.do_load, self.do_save = load, save
        self.load_tokens = load_tokens           # LoadSpec.tokens: the worker reports loads as KV events
        self.log = log or (lambda msg: None)
        self._reqs: Dict[str, _Req] = {}
        self._pending: Dict[str, int] = {}       # req id -> external tokens accepted this step
        self.counters = {"lookups": 0, "hit_tokens": 0, "loads_planned": 0, "resumed_loads": 0,
                         "saves_planned": 0, "saves_rearmed": 0, "stale_loads_dropped": 0, "save_plan_errors": 0,
                         "load_plan_errors": 0, "loads_unplannable": 0}
        self._bypassed: Dict[str, str] = {}      # req id -> why it bypasses the store (bypass_reason)

    # -- get_num_new_matched_tokens / update_state_after_alloc
    def matched(self, req_id: str, prompt_ids: Optional[Sequence[int]], num_computed_tokens: int,
                bypass: Optional[str] = None, ns_key: Optional[tuple] = None) -> int:
        """Tokens beyond num_computed_tokens that the store holds, in whole engine blocks, leaving at
        least one prompt token to compute (vLLM needs one to sample from). bypass: the reason this
        request neither loads nor saves (bypass_reason), counted once per request."""
        if bypass is not None:
            if req_id not in self._bypassed:
                self._bypassed[req_id] = bypass
                self.counters["bypassed_" + bypass] = self.counters.get("bypassed_" + bypass, 0) + 1
            return 0
        if not self.do_load:
            return 0
        self.counters["lookups"] += 1
        hashes = self.hash_blocks(prompt_ids, ns_key)
        hit = int(self.lookup(hashes, ns_key)[0]) if len(hashes) else 0
        matched = min(hit * self.T, len(prompt_ids) - 1) // self.eb * self.eb
        if matched <= num_computed_tokens:
            return 0
        return matched - num_computed_tokens

    def allocated(self, req_id: str, num_external_tokens: int) -> None:
        """vLLM accepted num_external_tokens of the hit (0: none) and scheduled the request. The
        scheduler asks for a waiting request's hit at every attempt to schedule it, so hits are
        counted here (hit_tokens), not per lookup."""
        if num_external_tokens > 0:
            self.counters["hit_tokens"] += num_external_tokens
            self._pending[req_id] = num_external_tokens
        else:
            self._pending.pop(req_id, None)

    # -- build_connector_meta
    def plan(self, out) -> Tuple[List[LoadSpec], List[SaveSpec], List[StepReq]]:
        """Loads, saves and the scheduled requests (StepReq: what the step computes, for the
        worker's BlockValidity) of one step. out: a vLLM SchedulerOutput (or the same fields).
        An error planning one request's load or save touches no other request: a load that
        cannot be planned is sent as a LoadSpec without hashes (the worker reports it failed),
        a save that cannot be planned is skipped."""
        loads: List[LoadSpec] = []
        saves: List[SaveSpec] = []
        steps: List[StepReq] = []
        scheduled: List[Tuple[str, _Req, int]] = []       # (id, state, computed before the step)
        for new in out.scheduled_new_reqs:
            rid, before = new.req_id, new.num_computed_tokens
            blocks = list(new.block_ids[0])
            steps.append(StepReq(rid, blocks, True, before, before + out.num_scheduled_tokens.get(rid, 0)))
            why = self._bypassed.get(rid) or bypass_reason(new)
            if why is not None:
                self._reqs.pop(rid, None)
                self._promised_not_loadable(rid, blocks, before, loads, why)
                continue
            st = _Req(ids=new.prompt_token_ids, blocks=blocks, ns_key=adapter_of(new))
            self._reqs[rid] = st                          # new, or resumed (V2 runner): state restarts
            self._plan_load(rid, st, before, loads)
            scheduled.append((rid, st, before))
        self._plan_cached(out, loads, steps, scheduled)
        for rid in list(self._pending):                   # accepted but not scheduled: never valid later
            self._pending.pop(rid)
            self.counters["stale_loads_dropped"] += 1
            self.log(f"request {rid}: an accepted load was not scheduled in the step; dropped")
        if self.do_save:
            for rid, st, before in scheduled:
                self._maybe_save(rid, st, before, out.num_scheduled_tokens.get(rid, 0), saves)
        for rid in out.finished_req_ids:
            self.finished(rid)
        return loads, saves, steps

    def _plan_cached(self, out, loads: List[LoadSpec], steps: List[StepReq], scheduled: list) -> None:
        cached = out.scheduled_cached_reqs
        for i, rid in enumerate(cached.req_ids):
            nb = cached.new_block_ids[i]
            resumed = rid in cached.resumed_req_ids
            before = cached.num_computed_tokens[i]
            new_blocks = list(nb[0]) if nb is not None else None
            steps.append(StepReq(rid, new_blocks if new_blocks is not None or not resumed else [], resumed, before,
                                 before + out.num_scheduled_tokens.get(rid, 0)))
            st = self._reqs.get(rid)
            if st is None:                                # bypassed
                self._promised_not_loadable(rid, new_blocks or [], before, loads, "not tracked")
                continue
            if resumed:                                   # V1 runner: all of the request's blocks
                st.blocks = new_blocks or []
            elif new_blocks:
                st.blocks.extend(new_blocks)
            if rid in self._pending:
                if not resumed:
                    self.log(f"request {rid}: a load was accepted for a request that is neither new nor resumed; "
                             "reported as failed")
                    self._promised_not_loadable(rid, st.blocks, before, loads, "neither new nor resumed")
                else:
                    self.counters["resumed_loads"] += 1
                    self._plan_load(rid, st, before, loads)
                    if loads and loads[-1].req_id == rid:
                        loads[-1].resumed = True
            scheduled.append((rid, st, before))

    def _maybe_save(self, rid: str, st: _Req, before: int, n_sched: int, saves: List[SaveSpec]) -> None:
        n = len(st.ids)
        if before < n and st.saved:                       # preempted or rolled back since its save
            st.saved = False
            self.counters["saves_rearmed"] += 1
        if st.saved or before + n_sched < n:
            return
        st.saved = True
        try:
            sv = self._plan_save(rid, st)
        except Exception as e:                            # this request's save only
            self.counters["save_plan_errors"] += 1
            self.log(f"request {rid}: planning its save failed ({type(e).__name__}: {e}); not saved")
            return
        if sv is not None:
            saves.append(sv)

    def _promised_not_loadable(self, rid: str, blocks: List[int], before: int, loads: List[LoadSpec],
                               why: str) -> None:
        """vLLM counts the accepted tokens as computed: the worker must report them failed."""
        n_ext = self._pending.pop(rid, 0)
        if n_ext <= 0:
            return
        self.counters["loads_unplannable"] += 1
        loads.append(LoadSpec(rid, None, list(blocks), before - n_ext, before))
        self.log(f"request {rid}: an accepted load of {n_ext} tokens cannot be carried out ({why}); the worker "
                 "reports it as a load error")

    def _plan_load(self, rid: str, st: _Req, before: int, loads: List[LoadSpec]) -> None:
        n_ext = self._pending.get(rid, 0)
        if n_ext <= 0:
            self._pending.pop(rid, None)
            return
        try:
            self._plan_load_of(rid, st, before, n_ext, loads)
            self._pending.pop(rid, None)
        except Exception as e:                            # this request's load only: reported failed
            self.counters["load_plan_errors"] += 1
            self._promised_not_loadable(rid, st.blocks, before, loads, f"{type(e).__name__}: {e}")

    def _plan_load_of(self, rid: str, st: _Req, before: int, n_ext: int, loads: List[LoadSpec]) -> None:
        # before = vLLM's local prefix hit + the external hit, in whole engine blocks
        hashes = self.hash_blocks(st.ids[:before], st.ns_key)
        toks = np.asarray(st.ids[before - n_ext: before], dtype=np.uint32) if self.load_tokens else None
        loads.append(LoadSpec(rid, hashes, list(st.blocks), before - n_ext, before, toks, ns_key=st.ns_key))
        self.counters["loads_planned"] += 1

    def _plan_save(self, rid: str, st: _Req) -> Optional[SaveSpec]:
        hashes = self.hash_blocks(st.ids, st.ns_key)
        if len(hashes) == 0:
            return None
        present = np.asarray(self.lookup(hashes, st.ns_key)[1], dtype=bool)
        missing = np.flatnonzero(~present)
        if not len(missing):
            return None
        self.counters["saves_planned"] += 1
        first = int(missing[0])
        # The saved blocks' ids go with them into the store's records (store_v1.md §3.2).
        ids = np.asarray(st.ids[first * self.T: len(hashes) * self.T], dtype=np.uint32)
        return SaveSpec(rid, hashes, first, list(st.blocks), ids, ns_key=st.ns_key)

    # -- request_finished
    def finished(self, req_id: str) -> None:
        self._reqs.pop(req_id, None)
        self._pending.pop(req_id, None)
        self._bypassed.pop(req_id, None)

    def live_requests(self) -> int:
        return len(self._reqs) + len(self._pending) + len(self._bypassed)


def bypass_reason(req) -> Optional[str]:
    """Why a request (vLLM's Request or NewRequestData) neither loads from nor saves to the store,
    or None. vLLM's own block hash covers more than token ids (v1/core/kv_cache_utils.py
    generate_block_hash_extra_keys): the LoRA adapter (every block), multimodal items, a cache
    salt (first block), prompt embeddings. A ucm block hash covers the token ids only, so such a
    request would share blocks it must not share: it is bypassed, and counted. (A LoRA request is
    served from its adapter's namespace instead: lora.py.)"""
    if getattr(req, "cache_salt", None):
        return "cache_salt"
    if getattr(req, "prompt_token_ids", ()) is None or getattr(req, "prompt_embeds", None) is not None:
        return "prompt_embeds"
    if getattr(req, "mm_features", None):
        return "multimodal"
    return None


def head_range(total_kv_heads: int, tp_size: int, tp_rank: int, local_heads: int) -> Tuple[int, int]:
    """The KV heads [h0, h1) that TP rank tp_rank holds, as vLLM 0.32 shards them
    (QKVParallelLinear, model_executor/layers/linear.py): total / tp heads each when tp divides the
    head count; when tp exceeds it, every rank holds one head, replicated tp / total times: rank r
    holds head r // (tp / total)."""
    if tp_size <= 1 or local_heads == total_kv_heads:
        return (0, local_heads)
    if tp_size >= total_kv_heads:
        if tp_size % total_kv_heads or local_heads != 1:
            raise ValueError(f"TP {tp_size} over {total_kv_heads} KV heads with {local_heads} heads on rank "
                             f"{tp_rank}: not vLLM's replication")
        h = tp_rank // (tp_size // total_kv_heads)
        return (h, h + 1)
    if total_kv_heads % tp_size or local_heads != total_kv_heads // tp_size:
        raise ValueError(f"{local_heads} KV heads on TP rank {tp_rank} of {tp_size} do not split {total_kv_heads} "
                         "heads evenly")
    return (tp_rank * local_heads, (tp_rank + 1) * local_heads)
