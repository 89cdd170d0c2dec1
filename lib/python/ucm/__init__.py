"""ucm: durable, shareable LLM KV caches. The Python package over libucm's C ABI.

A thin ctypes layer: libucm's C ABI (ucm/ucm.h, ucm/retrieval.h, ucm/blend.h, ucm/corpus.h) stays
the one contract; nothing is compiled at install time and torch is never imported. Guide:
docs/python.md.

    import ucm
    with ucm.Store("stores/python311-doc") as store:
        ns = store.namespace(name)                          # by name or id
        hashes = ucm.hash_blocks(ns.hash_seed, ids, ns.block_size)
        hit = store.lookup(ns, hashes)                      # hit.prefix_blocks
        kv = numpy.empty((hit.prefix_blocks,) + ns.payload_shape(), numpy.uint16)   # bf16
        status = store.load(ns, hashes[:hit.prefix_blocks], kv)                     # 0 = loaded

Errors raise ucm.Error subclasses named after the return codes (ucm.NotFound, ucm.Corruption,
ucm.Invalid, ucm.IO, ucm.Busy, ucm.Version, ucm.NotSupported, ucm.NoSpace, ucm.Pending,
ucm.Internal), carrying ucm_last_error()'s text.
"""
from __future__ import annotations

import logging as _logging
from pathlib import Path as _Path
from typing import Callable, Optional

from . import _lib
from ._lib import (DEST_CONTIGUOUS, DEST_DEVICE_PAGED, DEST_DEVICE_PAGED_HND, DEST_PAGED, DTYPE_BF16, DTYPE_F16, DTYPE_F32, POLICY_ESA, POLICY_GSA,
                   POLICY_PSA, POLICY_QUEST, REPR_R0, REPR_R1, REPR_R4, ROPE_SCALING_LINEAR, ROPE_SCALING_LLAMA3,
                   ROPE_SCALING_NONE)
from .blend import RopeParams, blend_select, blend_select_relevant, rope_shift
from .errors import (IO, Busy, Corruption, Error, Internal, Invalid, LibraryNotFound, NoSpace, NotFound,
                     NotSupported, Pending, Version)
from .retrieval import ReprBuffers, ReprInfo, Retriever, RetrieverParams, repr_encode
from .store import (Document, LookupResult, Namespace, Store, Task, code_name, event_medium, format_version,
                    hash_blocks, hash_root, namespace_id, parents_of, strerror, version)

__version__ = (_Path(__file__).with_name("VERSION")).read_text().strip()  # CMake reads it too

LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR = _lib.LOG_DEBUG, _lib.LOG_INFO, _lib.LOG_WARN, _lib.LOG_ERROR
_log_cb = None  # the ctypes callback must outlive its registration


def set_log_callback(fn: Optional[Callable[[int, str], None]], min_level: int = LOG_INFO) -> None:
    """Routes libucm's messages (the store's and RocksDB's) to fn(level, line) from now on; None
    restores lines on stderr. fn is called from libucm's threads, possibly several at once: it must
    be thread-safe, quick, and must not call into ucm."""
    global _log_cb
    lib = _lib.lib()
    if fn is None:
        lib.ucm_log_set_callback(_lib.LOG_CALLBACK(), None, min_level)
        _log_cb = None
        return
    cb = _lib.LOG_CALLBACK(lambda level, msg, _user: fn(int(level), msg.decode("utf-8", "replace")))
    lib.ucm_log_set_callback(cb, None, min_level)
    _log_cb = cb


def log_to_python(logger: Optional[_logging.Logger] = None, min_level: int = LOG_INFO) -> None:
    """Routes libucm's messages into a Python logger (default logging.getLogger("ucm"))."""
    lg = logger or _logging.getLogger("ucm")
    levels = {LOG_DEBUG: _logging.DEBUG, LOG_INFO: _logging.INFO, LOG_WARN: _logging.WARNING,
              LOG_ERROR: _logging.ERROR}
    set_log_callback(lambda level, line: lg.log(levels.get(level, _logging.INFO), "%s", line), min_level)


def library_path() -> str:
    """The path libucm was loaded from (loads it if needed)."""
    _lib.lib()
    return str(_lib.path())


def cuda_device_count() -> int:
    """CUDA devices libucm can load into (ucm_cuda_device_count): 0 when there is no device, no CUDA
    driver or no libucm_cuda.so (docs/library.md, "Device loads"). Loads the CUDA runtime."""
    import ctypes as C
    n = C.c_int(0)
    rc = _lib.lib().ucm_cuda_device_count(C.byref(n))
    return int(n.value) if rc == 0 else 0
