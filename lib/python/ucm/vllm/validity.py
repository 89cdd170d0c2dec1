"""Which engine blocks hold good KV: the connector's save invariant and its repair of bad reads.

The invariant (docs/vllm.md, "What the connector saves"): **a block is saved only if every engine
block its KV depends on holds good KV**, where good KV is KV loaded from the store without error,
or computed by this engine, after the last failure touching that block, over good KV. A block's
KV depends on every block before it in its request's block table (causal attention).

Why the connector has to track it, read in vLLM 0.32.0 (v1/core/sched/scheduler.py,
v1/core/kv_cache_manager.py):

* A synchronous load's engine blocks enter vLLM's prefix cache when they are allocated, before
  the worker has loaded them (allocate_slots caches num_computed + external tokens). A request
  scheduled later in the same step can take them as a local prefix hit and compute over them.
* Under the "recompute" policy a failed block stays hashed in the prefix cache
  (_handle_invalid_blocks evicts only under "fail"); only the first request holding it is
  truncated, the others keep it as computed and rely on that request recomputing it. If that
  request is preempted, aborted or finishes first, the garbage block goes back to the free queue
  still hashed, and a later request can hit it.
* A resumed (preempted) request's blocks may be a local hit on blocks freed by others.

So validity is tracked per engine block, from what every step actually does: the worker replays
each step's loads (with their outcome) and each scheduled request's computation (tokens
[before, after) of its block table, reading tokens [0, before)) in step order. A block's state
is the number of its leading tokens that hold good KV (0 when absent). A request that reads a
token of a block that is not good is a *bad read*: its computation this step is garbage, its
writes lose validity, and the worker reports the first such block to vLLM as a load error, so
vLLM truncates the request there, discards the step's output, and recomputes (the connector runs
vLLM with kv_load_failure_policy "recompute"). Saves are cut at the first token that is not good.

Pure Python, no vLLM or torch: tests/python/test_vllm_validity.py drives it step by step. One
instance per worker; every tensor-parallel rank feeds it the same steps and the same load
outcomes (the minimum over ranks), so every rank holds the same state and reports the same blocks.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Tuple


@dataclass
class StepReq:
    """One scheduled request of a step, as the scheduler saw it.
    blocks: its block ids (vLLM's order); replace: they are the whole table (a new or resumed
    request), else they are appended (None: no new blocks). before: tokens computed before the
    step (local + external hit on the first step); after: before + tokens scheduled."""
    req_id: str
    blocks: Optional[List[int]]
    replace: bool
    before: int
    after: int


@dataclass
class _Table:
    blocks: List[int] = field(default_factory=list)
    checked: int = 0        # tokens [0, checked) of the table were good at epoch `epoch`
    epoch: int = -1


class BlockValidity:
    def __init__(self, engine_block: int):
        self.eb = engine_block
        self.good: Dict[int, int] = {}        # block id -> leading tokens holding good KV
        self.tables: Dict[str, _Table] = {}
        self.epoch = 0                         # bumped whenever a block loses good tokens
        self.counters = {"bad_reads": 0, "blocks_invalidated": 0}

    # -- the scheduler's view of the step
    def begin_step(self, steps: Sequence[StepReq], finished: Iterable[str] = ()) -> None:
        for s in steps:
            t = self.tables.get(s.req_id)
            if t is None or s.replace:
                t = self.tables[s.req_id] = _Table(list(s.blocks or ()))
            elif s.blocks:
                t.blocks.extend(s.blocks)
        for rid in finished:
            self.tables.pop(rid, None)

    def forget(self, req_id: str) -> None:
        self.tables.pop(req_id, None)

    # -- writes
    def _set(self, block: int, n: int) -> None:
        old = self.good.get(block, 0)
        if n < old:
            self.epoch += 1
            self.counters["blocks_invalidated"] += 1
        if n:
            self.good[block] = n
        else:
            self.good.pop(block, None)

    def loaded(self, block_ids: Sequence[int], first_token: int, n_tokens: int, good_tokens: int) -> None:
        """A load wrote tokens [first_token, first_token + good_tokens) of the table block_ids
        with KV from the store and failed for the rest of [first_token, n_tokens) (those tokens
        hold nothing good, whatever they held before)."""
        end_good = first_token + good_tokens
        for i in range(first_token // self.eb, (n_tokens + self.eb - 1) // self.eb):
            if i >= len(block_ids):
                break
            lo = i * self.eb
            b = block_ids[i]
            if end_good >= lo + self.eb:
                self._set(b, self.eb)
            elif end_good > lo and self.good.get(b, 0) >= max(0, first_token - lo):
                self._set(b, end_good - lo)
            else:
                self._set(b, min(self.good.get(b, 0), max(0, first_token - lo)))

    def _write(self, blocks: List[int], start: int, end: int, undo: List[Tuple[int, int]]) -> None:
        """Good KV written to tokens [start, end) of the table: a block's good prefix grows when
        the write starts inside it (undo gets (block, old count) for each change)."""
        for i in range(start // self.eb, (end + self.eb - 1) // self.eb):
            if i >= len(blocks):
                break
            lo = i * self.eb
            s, e = max(start, lo) - lo, min(end, lo + self.eb) - lo
            g = self.good.get(blocks[i], 0)
            if g >= s and e > g:
                undo.append((blocks[i], g))
                self.good[blocks[i]] = e

    # -- reads
    def first_bad(self, req_id: str, n_tokens: int) -> Optional[Tuple[int, int]]:
        """(index in the table, block id) of the first block whose tokens among [0, n_tokens) are
        not all good; None when they all are (or n_tokens is 0)."""
        t = self.tables.get(req_id)
        if t is None:
            return None if n_tokens <= 0 else (0, -1)
        start = t.checked if t.epoch == self.epoch else 0
        start = min(start, n_tokens) // self.eb
        for i in range(start, (n_tokens + self.eb - 1) // self.eb):
            need = min(self.eb, n_tokens - i * self.eb)
            if i >= len(t.blocks):
                return (i, -1)
            if self.good.get(t.blocks[i], 0) < need:
                return (i, t.blocks[i])
        t.checked, t.epoch = n_tokens, self.epoch
        return None

    def compute(self, steps: Sequence[StepReq]) -> Dict[str, int]:
        """Replays the step's forward: every scheduled request reads tokens [0, before) and writes
        [before, after). A request recomputing a block makes it good for others that read it in
        the same step (vLLM writes a layer's KV for the whole batch before its attention), so
        good writes are applied to a fixpoint first. A request left with a bad read writes
        garbage, and so does any request that reads what it writes in the same step: those are
        found, the good writes undone and the fixpoint run again without them. Returns
        {req_id: block id to report to vLLM} for the bad reads (-1: a block its table lacks)."""
        forced: set = set()
        while True:
            undo: List[Tuple[int, int]] = []
            bad = self._fixpoint(steps, forced, undo)
            tainted = self._bad_writes(steps, bad)
            late = {s.req_id for s in steps if s.req_id not in bad and self._reads_any(s, tainted)}
            if not late:
                break
            for b, g in reversed(undo):          # the writes of requests found bad: undone
                if g:
                    self.good[b] = g
                else:
                    self.good.pop(b, None)
            self.epoch += 1
            forced |= late
        out: Dict[str, int] = {}
        for s in steps:
            if s.req_id in bad:
                fb = self.first_bad(s.req_id, s.before)
                out[s.req_id] = fb[1] if fb is not None else self._first_read(s, tainted)
                self.counters["bad_reads"] += 1
        for b, s0 in tainted.items():
            if self.good.get(b, 0) > s0:
                self._set(b, s0)
        return out

    def _fixpoint(self, steps: Sequence[StepReq], forced: set, undo: List[Tuple[int, int]]) -> set:
        pending = [s for s in steps if s.req_id not in forced]
        progress = True
        while progress and pending:
            progress, rest = False, []
            for s in pending:
                if self.first_bad(s.req_id, s.before) is None:
                    t = self.tables.get(s.req_id)
                    if t is not None:
                        self._write(t.blocks, s.before, s.after, undo)
                    progress = True
                else:
                    rest.append(s)
            pending = rest
        return forced | {s.req_id for s in pending}

    def _bad_writes(self, steps: Sequence[StepReq], bad: set) -> Dict[int, int]:
        """block id -> first token of it a bad request writes this step."""
        out: Dict[int, int] = {}
        for s in steps:
            t = self.tables.get(s.req_id)
            if s.req_id not in bad or t is None:
                continue
            for i in range(s.before // self.eb, min(len(t.blocks), (s.after + self.eb - 1) // self.eb)):
                s0 = max(s.before - i * self.eb, 0)
                out[t.blocks[i]] = min(out.get(t.blocks[i], self.eb), s0)
        return out

    def _reads_any(self, s: StepReq, tainted: Dict[int, int]) -> bool:
        return self._first_read(s, tainted) is not None

    def _first_read(self, s: StepReq, tainted: Dict[int, int]) -> Optional[int]:
        t = self.tables.get(s.req_id)
        if not tainted or t is None:
            return None
        for i in range(min(len(t.blocks), (s.before + self.eb - 1) // self.eb)):
            b = t.blocks[i]
            if b in tainted and tainted[b] < min(self.eb, s.before - i * self.eb):
                return b
        return None

    # -- saves
    def good_prefix(self, block_ids: Sequence[int], n_tokens: int) -> int:
        """Tokens [0, k) of the table block_ids (k <= n_tokens) that all hold good KV."""
        for i in range((n_tokens + self.eb - 1) // self.eb):
            need = min(self.eb, n_tokens - i * self.eb)
            g = self.good.get(block_ids[i], 0) if i < len(block_ids) else 0
            if g < need:
                return i * self.eb + g
        return n_tokens
