"""Loading libucm.so and declaring its C ABI (ucm/ucm.h, ucm/retrieval.h, ucm/blend.h, ucm/corpus.h)
for ctypes.

The library is searched, in order, at:
  1. ``$UCM_LIB`` (a path; when set, nothing else is tried);
  2. ``libucm.so`` beside this package (``ucm/_lib/``, for a bundled copy);
  3. the build tree of the source checkout this package lives in (``<repo>/build/lib``, or
     ``$UCM_BUILD_DIR/lib``), for an editable install;
  4. the dynamic linker's search path (``ctypes.util.find_library("ucm")``, then ``libucm.so``),
     e.g. ``/usr/local/lib`` after ``cmake --install``.
ctypes releases the GIL during every call into libucm, so waits on tasks do not block other
Python threads.
"""
from __future__ import annotations

import ctypes as C
import ctypes.util
import os
import threading
from pathlib import Path
from typing import List, Optional

from . import errors

# Constants of ucm/ucm.h.
OPEN_READ_ONLY, OPEN_READ_WRITE, OPEN_CREATE = 0, 1, 2
LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR = 0, 1, 2, 3
DEST_CONTIGUOUS, DEST_PAGED, DEST_DEVICE_PAGED, DEST_DEVICE_PAGED_HND = 0, 1, 2, 3
# ucm/retrieval.h
DTYPE_BF16, DTYPE_F16, DTYPE_F32 = 1, 2, 3
REPR_R0, REPR_R1, REPR_R4 = 0x1, 0x2, 0x4
POLICY_ESA, POLICY_QUEST, POLICY_GSA, POLICY_PSA = 0, 1, 2, 3
# ucm/blend.h
ROPE_SCALING_NONE, ROPE_SCALING_LINEAR, ROPE_SCALING_LLAMA3 = 0, 1, 2
# ucm/corpus.h
CORPUS_MALFORMED, CORPUS_EMPTY = 1, 2

u8p = C.POINTER(C.c_uint8)
u32p = C.POINTER(C.c_uint32)
szp = C.POINTER(C.c_size_t)
u64p = C.POINTER(C.c_uint64)
f32p = C.POINTER(C.c_float)
vpp = C.POINTER(C.c_void_p)


class OpenParams(C.Structure):
    """ucm_store_open_params."""
    _fields_ = [("struct_size", C.c_uint32), ("mode", C.c_int32), ("io_threads", C.c_uint32),
                ("direct_io", C.c_int32), ("refresh_interval_ms", C.c_uint32), ("reader_dir", C.c_char_p)]


class ReprInfoC(C.Structure):
    """ucm_repr_info."""
    _fields_ = [("struct_size", C.c_uint32), ("num_layers", C.c_uint32), ("num_kv_heads", C.c_uint32),
                ("head_dim", C.c_uint32), ("block_size", C.c_uint32), ("hash_bits", C.c_uint32),
                ("dtype", C.c_int32), ("sections", C.c_uint32), ("dense_layers", C.c_uint64)]


class ReprBuffersC(C.Structure):
    """ucm_repr_buffers."""
    _fields_ = [("struct_size", C.c_uint32), ("head_begin", C.c_uint32), ("head_end", C.c_uint32),
                ("dtype", C.c_int32), ("capacity", C.c_size_t), ("r0", C.c_void_p), ("r1", C.c_void_p),
                ("r4", u8p)]


class RetrieverParamsC(C.Structure):
    """ucm_retriever_params."""
    _fields_ = [("struct_size", C.c_uint32), ("policy", C.c_int32), ("sink_blocks", C.c_uint32),
                ("local_blocks", C.c_uint32), ("sparse_ratio", C.c_float), ("min_blocks", C.c_uint32),
                ("top_k", C.c_uint32), ("psa_tau", C.c_float), ("psa_max_blocks", C.c_uint32),
                ("reuse_steps", C.c_uint32), ("shared_heads", C.c_int32), ("honor_dense_layers", C.c_int32)]


class QueryC(C.Structure):
    """ucm_retrieval_query."""
    _fields_ = [("struct_size", C.c_uint32), ("layer", C.c_uint32), ("q", C.c_void_p), ("q_dtype", C.c_int32),
                ("n_q_heads", C.c_uint32), ("group_size", C.c_uint32), ("reprs", C.POINTER(ReprBuffersC)),
                ("n_blocks", C.c_size_t), ("valid", u8p), ("top_k", C.c_uint32)]


class RopeParamsC(C.Structure):
    """ucm_rope_params (layout of ucm 0.6: uint32_t struct_size)."""
    _fields_ = [("struct_size", C.c_uint32), ("head_dim", C.c_uint32), ("theta", C.c_double),
                ("scaling", C.c_int32), ("factor", C.c_double), ("low_freq_factor", C.c_double),
                ("high_freq_factor", C.c_double), ("original_max_position_embeddings", C.c_uint32)]


class BlendSelectParamsC(C.Structure):
    """ucm_blend_select_params."""
    _fields_ = [("struct_size", C.c_uint32), ("ratio", C.c_double), ("position_decay", C.c_double),
                ("relevance_exponent", C.c_double)]


LOG_CALLBACK = C.CFUNCTYPE(None, C.c_int32, C.c_char_p, C.c_void_p)
LAYER_CALLBACK = C.CFUNCTYPE(None, C.c_uint32, C.c_int, C.c_void_p)
CORPUS_ISSUE_CALLBACK = C.CFUNCTYPE(None, C.c_int32, C.c_char_p, C.c_char_p, C.c_void_p)


class CorpusOpenParamsC(C.Structure):
    """ucm_corpus_open_params (ucm 0.10.0)."""
    _fields_ = [("struct_size", C.c_uint32), ("strict", C.c_int32), ("suffix", C.c_char_p), ("glob", C.c_char_p),
                ("limit", C.c_uint64), ("shard_index", C.c_uint64), ("shard_count", C.c_uint64),
                ("on_issue", CORPUS_ISSUE_CALLBACK), ("on_issue_data", C.c_void_p)]


class LoadParamsC(C.Structure):
    """ucm_store_load_params (ucm 0.5.2; token_stride, head_stride 0.8.0)."""
    _fields_ = [("struct_size", C.c_uint32), ("dest_kind", C.c_int32), ("ptrs", vpp), ("head_begin", C.c_uint32),
                ("head_end", C.c_uint32), ("layer_caches", vpp), ("slots", C.POINTER(C.c_int64)),
                ("slot_stride", C.c_uint64), ("device", C.c_int32), ("stream", C.c_void_p),
                ("layer_events", vpp), ("on_layer", LAYER_CALLBACK), ("on_layer_data", C.c_void_p),
                ("token_stride", C.c_uint64), ("head_stride", C.c_uint64)]

class DumpParamsC(C.Structure):
    """ucm_store_dump_params (ucm 0.7.0; kv_pages and the strides 0.8.0)."""
    _fields_ = [("struct_size", C.c_uint32), ("reprs", vpp), ("repr_lens", szp), ("tokens", u32p),
                ("kv_pages", vpp), ("token_stride", C.c_uint64), ("head_stride", C.c_uint64)]


_I = C.c_int  # return codes (and plain ints: devices, timeouts)
_E = C.c_int32  # enum-like values passed in: UCM_DEST_*, UCM_DTYPE_*, UCM_LOG_* (ucm.h conventions)
# name: (restype, argtypes). Every function of the four public headers.
SIGNATURES = {
    # ucm/ucm.h
    "ucm_version": (C.c_char_p, []),
    "ucm_format_version": (C.c_uint32, []),
    "ucm_last_error": (C.c_char_p, []),
    "ucm_strerror": (C.c_char_p, [_I]),
    "ucm_code_name": (C.c_char_p, [_I]),
    "ucm_log_set_callback": (None, [LOG_CALLBACK, C.c_void_p, _E]),
    "ucm_store_default_open_params": (OpenParams, []),
    "ucm_store_open": (_I, [C.c_char_p, C.POINTER(OpenParams), vpp]),
    "ucm_store_open_shard": (_I, [C.c_char_p, C.POINTER(OpenParams), C.c_char_p, vpp]),
    "ucm_store_close": (None, [C.c_void_p]),
    "ucm_store_refresh": (_I, [C.c_void_p]),
    "ucm_store_namespace_find": (_I, [C.c_void_p, C.c_char_p, u8p, C.c_char_p, C.c_size_t, szp]),
    "ucm_store_namespace_list": (_I, [C.c_void_p, C.c_char_p, C.c_size_t, szp]),
    "ucm_store_namespace_hash_seed": (_I, [C.c_void_p, u8p, u8p]),
    "ucm_namespace_id": (_I, [C.c_char_p, u8p]),
    "ucm_model_fingerprint": (_I, [C.c_char_p, C.c_char_p, C.c_char_p, C.c_size_t, szp]),
    "ucm_store_namespace_register": (_I, [C.c_void_p, C.c_char_p, u8p]),
    "ucm_store_namespace_match": (_I, [C.c_void_p, C.c_char_p, C.c_uint32, C.c_char_p, u8p, C.POINTER(C.c_int)]),
    "ucm_store_namespace_create": (_I, [C.c_void_p, C.c_char_p, u8p]),
    "ucm_store_attachment_get": (_I, [C.c_void_p, u8p, C.c_char_p, C.c_void_p, C.c_size_t, szp]),
    "ucm_store_document_get": (_I, [C.c_void_p, u8p, C.c_char_p, C.c_char_p, C.c_size_t, u64p, u64p]),
    "ucm_store_document_put": (_I, [C.c_void_p, u8p, C.c_char_p, C.c_char_p, u32p, C.c_size_t, C.c_char_p]),
    "ucm_hash_blocks": (_I, [u8p, u8p, u32p, C.c_size_t, C.c_uint32, u8p, C.c_size_t, szp]),
    "ucm_hash_root": (_I, [u8p, u8p]),
    "ucm_store_lookup": (_I, [C.c_void_p, u8p, u8p, C.c_size_t, u8p, szp]),
    "ucm_store_load": (_I, [C.c_void_p, u8p, u8p, C.c_size_t, _E, vpp, C.c_uint32, C.c_uint32, vpp]),
    "ucm_store_default_load_params": (LoadParamsC, []),
    "ucm_store_load_ex": (_I, [C.c_void_p, u8p, u8p, C.c_size_t, C.POINTER(LoadParamsC), vpp]),
    "ucm_cuda_device_count": (_I, [C.POINTER(C.c_int)]),
    "ucm_store_dump": (_I, [C.c_void_p, u8p, u8p, u8p, C.c_size_t, vpp, vpp]),
    "ucm_store_dump_repr": (_I, [C.c_void_p, u8p, u8p, u8p, C.c_size_t, vpp, vpp, szp, vpp]),
    "ucm_store_default_dump_params": (DumpParamsC, []),
    "ucm_store_dump_ex": (_I, [C.c_void_p, u8p, u8p, u8p, C.c_size_t, vpp, C.POINTER(DumpParamsC), vpp]),
    "ucm_store_chain_tokens": (_I, [C.c_void_p, u8p, u8p, u32p, C.c_size_t, szp, szp]),
    "ucm_task_check": (_I, [C.c_void_p]),
    "ucm_task_wait": (_I, [C.c_void_p, _I]),
    "ucm_task_block_status": (_I, [C.c_void_p, C.c_size_t]),
    "ucm_task_free": (None, [C.c_void_p]),
    "ucm_store_metrics": (_I, [C.c_void_p, C.c_char_p, C.c_size_t, szp]),
    "ucm_event_medium": (_I, [C.c_char_p, C.c_char_p, C.c_size_t, szp]),
    "ucm_sglang_page_hashes": (_I, [u8p, u32p, C.c_size_t, C.c_uint32, u8p, C.c_size_t, szp]),
    "ucm_sglang_namespace_seed": (_I, [C.c_char_p, C.c_size_t, C.c_char_p, C.c_size_t, u8p, C.POINTER(_I)]),
    "ucm_sglang_pages_open": (_I, [C.c_void_p, u8p, C.c_uint32, C.POINTER(C.c_void_p)]),
    "ucm_sglang_pages_close": (None, [C.c_void_p]),
    "ucm_sglang_pages_info": (_I, [C.c_void_p, C.POINTER(C.c_uint32), C.POINTER(C.c_uint64)]),
    "ucm_sglang_pages_lookup": (_I, [C.c_void_p, u8p, C.c_size_t, u8p, u8p, szp]),
    # ucm/retrieval.h
    "ucm_store_repr_info": (_I, [C.c_void_p, u8p, C.POINTER(ReprInfoC)]),
    "ucm_store_load_repr": (_I, [C.c_void_p, u8p, u8p, C.c_size_t, C.POINTER(ReprBuffersC), C.c_size_t, vpp]),
    "ucm_repr_encode": (_I, [C.POINTER(ReprInfoC), f32p, f32p, C.c_void_p, C.c_size_t, szp]),
    "ucm_retriever_default_params": (RetrieverParamsC, []),
    "ucm_retriever_params_load": (_I, [C.c_char_p, C.POINTER(RetrieverParamsC)]),
    "ucm_retriever_create": (_I, [C.POINTER(RetrieverParamsC), C.POINTER(ReprInfoC), f32p, vpp]),
    "ucm_retriever_free": (None, [C.c_void_p]),
    "ucm_retriever_select": (_I, [C.c_void_p, C.POINTER(QueryC), u32p, C.c_size_t, u32p, u32p]),
    "ucm_retriever_reset": (None, [C.c_void_p]),
    # ucm/blend.h
    "ucm_rope_default_params": (RopeParamsC, []),
    "ucm_store_rope_params": (_I, [C.c_void_p, u8p, C.POINTER(RopeParamsC)]),
    "ucm_store_chunk_prefix": (_I, [C.c_void_p, u8p, u32p, C.c_size_t, szp]),
    "ucm_rope_shift": (_I, [C.POINTER(RopeParamsC), C.c_void_p, _E, C.c_size_t, C.c_uint32, C.c_size_t,
                            C.c_int64]),
    "ucm_rope_shift_device": (_I, [C.POINTER(RopeParamsC), C.c_void_p, _E, C.c_size_t, C.c_uint32, C.c_size_t,
                                   C.c_int64, _I, C.c_void_p]),
    "ucm_blend_select": (_I, [f32p, f32p, C.c_size_t, C.c_size_t, C.c_double, u32p, C.c_size_t, szp, f32p]),
    "ucm_blend_select_default_params": (BlendSelectParamsC, []),
    "ucm_blend_select_weighted": (_I, [C.POINTER(BlendSelectParamsC), f32p, f32p, u32p, C.c_size_t, C.c_size_t,
                                       u32p, C.c_size_t, szp, f32p]),
    "ucm_blend_select_relevant": (_I, [C.POINTER(BlendSelectParamsC), f32p, f32p, u32p, f32p, C.c_size_t,
                                       C.c_size_t, u32p, C.c_size_t, szp, f32p]),
    # ucm/corpus.h
    "ucm_corpus_default_open_params": (CorpusOpenParamsC, []),
    "ucm_corpus_open": (_I, [C.c_char_p, C.POINTER(CorpusOpenParamsC), vpp]),
    "ucm_corpus_next": (_I, [C.c_void_p, vpp, szp]),
    "ucm_corpus_stats": (_I, [C.c_void_p, u64p, u64p, u64p]),
    "ucm_corpus_close": (None, [C.c_void_p]),
    "ucm_corpus_template": (_I, [C.c_char_p, C.c_char_p, C.c_size_t, szp]),
}

_lock = threading.Lock()
_lib: Optional[C.CDLL] = None
_path: Optional[str] = None


def _candidates() -> List[str]:
    env = os.environ.get("UCM_LIB")
    if env:
        return [env]
    here = Path(__file__).resolve().parent
    out = [str(here / "_lib" / "libucm.so")]
    build = os.environ.get("UCM_BUILD_DIR")
    if build:
        out.append(str(Path(build) / "lib" / "libucm.so"))
    # lib/python/ucm -> the checkout's root (an editable install or PYTHONPATH=lib/python).
    root = here.parents[2]
    if (root / "lib" / "include" / "ucm" / "ucm.h").exists():
        out.append(str(root / "build" / "lib" / "libucm.so"))
    found = ctypes.util.find_library("ucm")
    if found:
        out.append(found)
    out.append("libucm.so")
    return out


def lib() -> C.CDLL:
    """The loaded libucm (loaded on first use). Raises ucm.LibraryNotFound naming every place tried."""
    global _lib, _path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for cand in _candidates():
            if os.sep in cand and not os.path.exists(cand):
                tried.append(f"{cand} (absent)")
                continue
            try:
                handle = C.CDLL(cand)
            except OSError as e:
                tried.append(f"{cand} ({e})")
                continue
            for name, (res, args) in SIGNATURES.items():
                try:
                    f = getattr(handle, name)
                except AttributeError:
                    raise errors.LibraryNotFound(f"{cand} lacks {name}: it is older than this ucm package "
                                                 "(rebuild libucm, or point $UCM_LIB at a current one)")
                f.restype, f.argtypes = res, args
            _path = cand
            _lib = handle
            return handle
        raise errors.LibraryNotFound("cannot load libucm.so; tried: " + "; ".join(tried) +
                                     ". Build it (scripts/build.sh), install it, or set $UCM_LIB to its path")


def path() -> Optional[str]:
    """Where libucm was loaded from (None before the first use)."""
    return _path


def check(rc: int, what: str = "") -> None:
    """Raises the ucm.Error subclass of rc (with ucm_last_error()'s text) unless rc is UCM_OK."""
    if rc == errors.OK:
        return
    msg = lib().ucm_last_error().decode("utf-8", "replace")
    if not msg:
        msg = lib().ucm_strerror(rc).decode()
    if what and what not in msg:
        msg = f"{what}: {msg}"
    raise errors.error_for(rc, msg)
