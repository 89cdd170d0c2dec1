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
