"""A corpus as `ucm precompute` reads it, through libucm (ucm/corpus.h; docs/corpus.md).

The ids, order, directory filter, sharding and skip rules are those of ucm's one corpus reader
(pipelines/corpus), not a copy of them:

    with ucm.corpus.Corpus("/usr/share/doc/python3.11/html/_sources", suffix=".rst.txt") as c:
        for e in c:     # {"id", "source", "text"} or {"id", "source", "token_ids"[, "prefix_tokens"]}
            ...
        c.stats()       # {"documents": ..., "malformed": ..., "empty": ...}
"""
from __future__ import annotations

import ctypes as C
import json
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

from . import _lib as L
from ._handle import Handle

# A skipped entry: on_issue(kind, location, reason), kind "malformed" or "empty".
IssueFn = Callable[[str, str, str], None]
_KINDS = {L.CORPUS_MALFORMED: "malformed", L.CORPUS_EMPTY: "empty"}


class Corpus(Handle):
    """The documents of a JSONL file or a directory of text files (ucm_corpus_open). Iterating
    yields each entry as a dict; `on_issue` hears of each skipped entry as the reader meets it.
    Raises ucm.NotFound (no such path), ucm.IO, ucm.Invalid (bad shard; with strict, a malformed
    entry while iterating). One thread at a time."""

    def __init__(self, path: str, suffix: str = "", glob: str = "", limit: int = 0, shard: Tuple[int, int] = (0, 1),
                 strict: bool = False, on_issue: Optional[IssueFn] = None):
        lib = L.lib()
        p = lib.ucm_corpus_default_open_params()
        p.strict = 1 if strict else 0
        p.suffix = suffix.encode() if suffix else None
        p.glob = glob.encode() if glob else None
        p.limit = int(limit)
        p.shard_index, p.shard_count = int(shard[0]), int(shard[1])
        # The ctypes callback must outlive the handle: kept on self.
        self._cb = L.CORPUS_ISSUE_CALLBACK(self._issue_cb(on_issue)) if on_issue else None
        if self._cb:
            p.on_issue = self._cb
        h = C.c_void_p()
        L.check(lib.ucm_corpus_open(str(path).encode(), C.byref(p), C.byref(h)), f"corpus {path}")
        self._h = h

    @staticmethod
    def _issue_cb(fn: IssueFn):
        def cb(kind, location, reason, _user):
            fn(_KINDS.get(int(kind), str(kind)), location.decode("utf-8", "replace"), reason.decode("utf-8", "replace"))
        return cb

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        lib, entry, n = L.lib(), C.c_void_p(), C.c_size_t()
        while True:
            L.check(lib.ucm_corpus_next(self._handle(), C.byref(entry), C.byref(n)), "ucm_corpus_next")
            if not entry.value:
                return
            yield json.loads(C.string_at(entry.value, n.value).decode("utf-8"))

    def stats(self) -> Dict[str, int]:
        """Documents returned so far, and the entries skipped as malformed and as empty."""
        d, m, e = C.c_uint64(), C.c_uint64(), C.c_uint64()
        L.check(L.lib().ucm_corpus_stats(self._handle(), C.byref(d), C.byref(m), C.byref(e)), "ucm_corpus_stats")
        return {"documents": int(d.value), "malformed": int(m.value), "empty": int(e.value)}

    def _handle(self) -> C.c_void_p:
        if not getattr(self, "_h", None):
            raise ValueError("the corpus is closed")
        return self._h

    def close(self) -> None:
        if getattr(self, "_h", None):
            L.lib().ucm_corpus_close(self._h)
            self._h = None


def read_template(path: Optional[str]) -> Tuple[str, str]:
    """(prefix, suffix) of a prompt template file as precompute splits it (ucm_corpus_template):
    at the first "{document}", else all of it the prefix. No path: ("", "")."""
    if not path:
        return "", ""
    lib, need = L.lib(), C.c_size_t()
    L.check(lib.ucm_corpus_template(str(path).encode(), None, 0, C.byref(need)), f"template {path}")
    buf = C.create_string_buffer(need.value + 1)
    L.check(lib.ucm_corpus_template(str(path).encode(), buf, len(buf), None), f"template {path}")
    j = json.loads(buf.raw[:need.value].decode("utf-8"))
    return j["prefix"], j["suffix"]
