"""The connector's KV cache events (docs/vllm.md, "KV events"): what it loads and saves, told to
vLLM's own event publisher as BlockStored events of the ucm medium.

Only when vLLM's KV events are on (enabled()): a saving worker reports each run of consecutive
blocks of a request that its dump stored (status 0), a loading worker each run of blocks vLLM
keeps from a load (a reuse report, as vLLM's block_pool.emit_cached_block_events reports prefix
cache reuse). One BlockStored per run: block_hashes are the ucm block hashes (16 bytes each),
parent_block_hash the hash before the run (None when the run starts its chain), token_ids the
run's ids, block_size the namespace's. The connector converts Runs to vLLM's BlockStored.

No vLLM or torch import (tests/python/test_vllm_planner.py): the connector builds its
KVConnectorKVEvents class from EventQuorum, and the events from Runs.
"""
from __future__ import annotations

import collections
import threading
from typing import Any, Hashable, List, NamedTuple, Optional, Sequence


def enabled(vllm_config: Any) -> bool:
    """vLLM publishes KV cache events (--kv-events-config with enable_kv_cache_events)."""
    cfg = getattr(vllm_config, "kv_events_config", None)
    return bool(cfg is not None and getattr(cfg, "enable_kv_cache_events", False))


class Run(NamedTuple):
    block_hashes: List[bytes]
    parent_block_hash: Optional[bytes]
    token_ids: List[int]


def block_runs(hashes: Any, parent: Optional[bytes], ok: Optional[Sequence[bool]], tokens: Any,
               block_size: int) -> List[Run]:
    """The maximal runs of consecutive blocks with ok[i] (every block when ok is None).

    hashes: uint8 [n][16], consecutive blocks of one chain; parent: the hash of the block before
    hashes[0], or None when hashes[0] is the chain's first block; tokens: the n blocks' ids
    (n * block_size), or None (token_ids then empty)."""
    n = len(hashes)
    flags = [True] * n if ok is None else [bool(x) for x in ok]
    if len(flags) != n:
        raise ValueError(f"{len(flags)} status flags for {n} blocks")
    if tokens is not None and len(tokens) != n * block_size:
        raise ValueError(f"{len(tokens)} token ids for {n} blocks of {block_size}")
    runs: List[Run] = []
    i = 0
    while i < n:
        if not flags[i]:
            i += 1
            continue
        j = i
        while j < n and flags[j]:
            j += 1
        runs.append(Run([hashes[k].tobytes() for k in range(i, j)],
                        parent if i == 0 else hashes[i - 1].tobytes(),
                        [] if tokens is None else [int(t) for t in tokens[i * block_size: j * block_size]]))
        i = j
    return runs


class EventQuorum:
    """Events of several workers, keeping those every worker reported (vLLM's KVConnectorKVEvents
    contract, as KVEventAggregator / MooncakeStoreKVEvents: vLLM's KVOutputAggregator adds each
    further worker's events and increments the worker count). Order and repeats are kept: an
    event reported k times by each of w workers is common k times. The connector reports from TP
    rank 0 only (it alone writes, and it learns the loads every rank kept), so one worker's
    events are all common."""

    def __init__(self, num_workers: int = 1):
        if num_workers <= 0:
            raise ValueError("num_workers must be greater than zero")
        self._events: List[Hashable] = []
        self._workers = num_workers

    def add_events(self, events: list) -> None:
        if not isinstance(events, list):
            raise TypeError("events must be a list of KVCacheEvent")
        self._events.extend(events)

    def increment_workers(self, count: int = 1) -> None:
        if count <= 0:
            raise ValueError("count must be positive")
        self._workers += count

    def get_number_of_workers(self) -> int:
        return self._workers

    def get_all_events(self) -> list:
        return list(self._events)

    def clear_events(self) -> None:
        self._events.clear()
        self._workers = 1

    def common_events(self) -> list:
        counts = collections.Counter(self._events)
        taken: collections.Counter = collections.Counter()
        out = []
        for e in self._events:
            if taken[e] < counts[e] // self._workers:
                taken[e] += 1
                out.append(e)
        return out

    def aggregate(self):
        """Keeps only the common events, now counted as one worker's."""
        self._events = self.common_events()
        self._workers = 1
        return self

    def __len__(self) -> int:
        return len(self._events)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} workers={self._workers} events={len(self._events)}>"


class EventBuffer:
    """A worker's events between two engine steps: added by the save thread and the step, drained
    by the step (get_kv_connector_kv_cache_events). Thread-safe; beyond max_events (an engine
    that stopped stepping while saves complete) further events are dropped and counted."""

    def __init__(self, max_events: int = 1 << 16):
        self._lock = threading.Lock()
        self._events: list = []
        self.max_events = max_events
        self.dropped = 0

    def add(self, events: list) -> None:
        with self._lock:
            room = self.max_events - len(self._events)
            self._events.extend(events[:max(room, 0)])
            self.dropped += max(len(events) - max(room, 0), 0)

    def drain(self) -> list:
        with self._lock:
            out, self._events = self._events, []
            return out


class Announced:
    """The blocks this server announced as stored (its saves and loads, by ucm block hash), so
    that it can announce them removed once the store no longer holds them (`ucm gc` removed them):
    a router otherwise keeps crediting this server with them.

    Bounded: at most `max_blocks` (the oldest forgotten first: never announced removed; `ucm
    events` publishes gc's removals of every block). check() is due every `interval_s`; it takes
    the `per_check` blocks checked longest ago (round robin), so a check costs at most that many
    lookups whatever the count."""

    def __init__(self, max_blocks: int = 1 << 20, per_check: int = 4096, interval_s: float = 5.0,
                 clock: Any = None):
        import time
        self.max_blocks, self.per_check, self.interval_s = max_blocks, per_check, interval_s
        self._clock = clock or time.monotonic
        self._blocks: "collections.OrderedDict[bytes, None]" = collections.OrderedDict()
        self._next = self._clock() + interval_s
        self.forgotten = 0

    def add(self, hashes: Sequence[bytes]) -> None:
        for h in hashes:
            self._blocks[bytes(h)] = None
            self._blocks.move_to_end(bytes(h))
        while len(self._blocks) > self.max_blocks:
            self._blocks.popitem(last=False)
            self.forgotten += 1

    def __len__(self) -> int:
        return len(self._blocks)

    def check(self, present: Any) -> List[bytes]:
        """When due: the blocks of this round that `present(hashes) -> [bool]` says the store no
        longer holds (forgotten here); [] otherwise."""
        if self._clock() < self._next or not self._blocks:
            return []
        self._next = self._clock() + self.interval_s
        batch = [h for h, _ in zip(self._blocks, range(self.per_check))]
        gone = []
        for h, there in zip(batch, present(batch)):
            if there:
                self._blocks.move_to_end(h)  # checked: to the back of the round
            else:
                del self._blocks[h]
                gone.append(h)
        return gone
