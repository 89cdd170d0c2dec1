"""The connector's background saves: a queue bounded in bytes, one thread, never a wait on disk.

A step copies a prompt's blocks out of the engine's KV cache (the only part it waits for) and
offers the copy here. When the queued copies would exceed max_bytes, the offer is refused and
counted (the save is dropped: the store simply misses those blocks), so a slow or failing disk
costs saves, never step time or memory. No vLLM or torch import (tests/python/test_vllm_planner.py).
"""
from __future__ import annotations

import collections
import threading
import time
from typing import Any, Callable, Deque, Optional, Tuple


class SaveQueue:
    """run(item) is called on the queue's thread for each accepted item, in order; an exception
    from it is passed to on_error(item, exc) and the thread goes on. Thread-safe."""

    def __init__(self, run: Callable[[Any], None], max_bytes: int,
                 on_error: Optional[Callable[[Any, BaseException], None]] = None, name: str = "ucm-save"):
        if max_bytes <= 0:
            raise ValueError(f"save queue bound {max_bytes} bytes: must be > 0")
        self._run, self._on_error = run, on_error or (lambda item, e: None)
        self.max_bytes = max_bytes
        self._q: Deque[Tuple[Any, int]] = collections.deque()
        self._cv = threading.Condition()
        self._queued_bytes = 0
        self._busy = 0                       # items taken by the thread and not finished
        self._closing = False
        self._thread: Optional[threading.Thread] = None
        self._name = name
        self.counters = {"accepted": 0, "done": 0, "failed": 0, "dropped_full": 0, "dropped_bytes": 0,
                         "dropped_at_close": 0}

    @property
    def queued_bytes(self) -> int:
        return self._queued_bytes

    def has_room(self, nbytes: int) -> bool:
        """Whether an offer of nbytes would be accepted now (to skip a copy-out that would be dropped)."""
        with self._cv:
            return not self._closing and self._queued_bytes + nbytes <= self.max_bytes

    def offer(self, item: Any, nbytes: int) -> bool:
        """Queues item (holding nbytes) unless that would exceed max_bytes or the queue is closing;
        False = dropped (counted). Never blocks."""
        with self._cv:
            if self._closing or self._queued_bytes + nbytes > self.max_bytes:
                self.counters["dropped_full"] += 1
                self.counters["dropped_bytes"] += nbytes
                return False
            self._q.append((item, nbytes))
            self._queued_bytes += nbytes
            self.counters["accepted"] += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()
            self._cv.notify()
            return True

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._q and not self._closing:
                    self._cv.wait()
                if not self._q:
                    return
                item, nbytes = self._q.popleft()
                self._busy += 1
            try:
                self._run(item)
                ok = True
            except BaseException as e:       # a save is best effort: the request is unaffected
                ok = False
                try:
                    self._on_error(item, e)
                except Exception:
                    pass
            with self._cv:
                self._busy -= 1
                self._queued_bytes -= nbytes
                self.counters["done" if ok else "failed"] += 1
                self._cv.notify_all()

    def flush(self, timeout: float) -> bool:
        """Waits until every accepted item is done, at most timeout seconds; True if all are."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while self._q or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(left)
        return True

    def close(self, drain_timeout: float, join_timeout: float = 60.0) -> bool:
        """Finishes queued items for at most drain_timeout seconds, drops (and counts) the rest,
        and joins the thread (after the item it is running, at most join_timeout seconds more).
        True when the thread is gone (the store may be closed); False when an item still runs
        (a disk that hangs): the caller must then leave the store open. Idempotent."""
        self.flush(drain_timeout)
        with self._cv:
            self._closing = True
            while self._q:
                _, nbytes = self._q.popleft()
                self._queued_bytes -= nbytes
                self.counters["dropped_at_close"] += 1
            self._cv.notify_all()
            t = self._thread
        if t is not None:
            t.join(join_timeout)
            return not t.is_alive()
        return True
