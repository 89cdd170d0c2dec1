#!/usr/bin/env python3
"""libucm through ctypes, the way a Python inference server uses it (stdlib only).

Usage: test_ctypes.py [path/to/libucm.so [expected version]]   (or env UCM_LIB)

Creates a store, registers a namespace, hashes a token array, dumps blocks, opens a second
(read-only) handle, looks up, loads into ctypes buffers with a KV-head range (contiguous and
paged) and checks the bytes against the payload layout of formats/store/store_v1.md §4.2,
reads the metrics. Exits non-zero on the first failure.
"""
import ctypes as C
import hashlib
import json
import os
import shutil
import struct
import sys
import tempfile

UCM_OK, UCM_E_NOT_FOUND, UCM_E_INVALID = 0, 1, 3
UCM_OPEN_READ_ONLY, UCM_OPEN_CREATE = 0, 2
UCM_DEST_CONTIGUOUS, UCM_DEST_PAGED = 0, 1

L, T, H, D, S = 2, 16, 4, 8, 2  # layers, block tokens, KV heads, head dim, bf16 bytes
PAYLOAD = L * 2 * T * H * D * S


class OpenParams(C.Structure):
    """ucm_store_open_params (ucm/ucm.h)."""
    _fields_ = [("struct_size", C.c_uint32), ("mode", C.c_int32), ("io_threads", C.c_uint32),
                ("direct_io", C.c_int32), ("refresh_interval_ms", C.c_uint32), ("reader_dir", C.c_char_p)]


LOG_CB = C.CFUNCTYPE(None, C.c_int, C.c_char_p, C.c_void_p)


def load_lib(path):
    lib = C.CDLL(path)
    u8p, szp = C.POINTER(C.c_uint8), C.POINTER(C.c_size_t)
    sig = {
        "ucm_version": (C.c_char_p, []),
        "ucm_last_error": (C.c_char_p, []),
        "ucm_strerror": (C.c_char_p, [C.c_int]),
        "ucm_code_name": (C.c_char_p, [C.c_int]),
        "ucm_log_set_callback": (None, [LOG_CB, C.c_void_p, C.c_int]),
        "ucm_store_default_open_params": (OpenParams, []),
        "ucm_store_open": (C.c_int, [C.c_char_p, C.POINTER(OpenParams), C.POINTER(C.c_void_p)]),
        "ucm_store_close": (None, [C.c_void_p]),
        "ucm_store_refresh": (C.c_int, [C.c_void_p]),
        "ucm_store_namespace_register": (C.c_int, [C.c_void_p, C.c_char_p, u8p]),
        "ucm_store_namespace_find": (C.c_int, [C.c_void_p, C.c_char_p, u8p, C.c_char_p, C.c_size_t, szp]),
        "ucm_store_namespace_hash_seed": (C.c_int, [C.c_void_p, u8p, u8p]),
        "ucm_hash_blocks": (C.c_int, [u8p, u8p, C.POINTER(C.c_uint32), C.c_size_t, C.c_uint32, u8p, C.c_size_t, szp]),
        "ucm_store_lookup": (C.c_int, [C.c_void_p, u8p, u8p, C.c_size_t, u8p, szp]),
        "ucm_store_load": (C.c_int, [C.c_void_p, u8p, u8p, C.c_size_t, C.c_int, C.POINTER(C.c_void_p),
                                     C.c_uint32, C.c_uint32, C.POINTER(C.c_void_p)]),
        "ucm_store_dump": (C.c_int, [C.c_void_p, u8p, u8p, u8p, C.c_size_t, C.POINTER(C.c_void_p),
                                     C.POINTER(C.c_void_p)]),
        "ucm_task_check": (C.c_int, [C.c_void_p]),
        "ucm_task_wait": (C.c_int, [C.c_void_p, C.c_int]),
        "ucm_task_block_status": (C.c_int, [C.c_void_p, C.c_size_t]),
        "ucm_task_free": (None, [C.c_void_p]),
        "ucm_store_metrics": (C.c_int, [C.c_void_p, C.c_char_p, C.c_size_t, szp]),
    }
    for name, (res, args) in sig.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    return lib


def check(lib, rc, what):
    if rc != UCM_OK:
        raise AssertionError(f"{what}: {lib.ucm_code_name(rc).decode()}: {lib.ucm_last_error().decode()}")


def open_store(lib, path, mode):
    """ucm_store_open with the default params and `mode`; returns the handle."""
    p = lib.ucm_store_default_open_params()
    assert p.struct_size == C.sizeof(OpenParams), (p.struct_size, C.sizeof(OpenParams))
    p.mode = mode
    h = C.c_void_p()
    check(lib, lib.ucm_store_open(path, C.byref(p), C.byref(h)), f"open mode {mode}")
    return h


def payload(i):
    return bytes((i * 37 + j * 7 + 1) & 0xFF for j in range(PAYLOAD))


def heads_slice(p, h0, h1):
    """Expected bytes of heads [h0, h1) of one block, [L][2][T][h1-h0][D] (spec §4.2)."""
    out = bytearray()
    for l in range(L):
        for kv in range(2):
            for t in range(T):
                off = (((l * 2 + kv) * T + t) * H + h0) * D * S
                out += p[off: off + (h1 - h0) * D * S]
    return bytes(out)


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("UCM_LIB", "libucm.so")
    lib = load_lib(path)
    if len(sys.argv) > 2:
        assert lib.ucm_version().decode() == sys.argv[2], (lib.ucm_version(), sys.argv[2])
    assert lib.ucm_code_name(2) == b"UCM_E_CORRUPTION"
    assert b"checksum" in lib.ucm_strerror(2)
    # A server routes libucm's messages into its own log.
    messages = []
    log_cb = LOG_CB(lambda level, msg, user: messages.append((level, msg.decode())))
    lib.ucm_log_set_callback(log_cb, None, 0)
    tmp = tempfile.mkdtemp(prefix="ucm_ctypes_")
    store_path = os.path.join(tmp, "store").encode()
    try:
        w = open_store(lib, store_path, UCM_OPEN_CREATE)
        desc = {"model_id": "ctypes-model", "weights_digest": "cafe", "dtype": "bf16", "block_size": T,
                "num_layers": L, "num_kv_heads": H, "head_dim": D, "name": "py"}
        ns = (C.c_uint8 * 16)()
        check(lib, lib.ucm_store_namespace_register(w, json.dumps(desc).encode(), ns), "register")

        tokens = list(range(1000, 1000 + 3 * T + 5))
        toks = (C.c_uint32 * len(tokens))(*tokens)
        hashes = (C.c_uint8 * (16 * 3))()
        nb = C.c_size_t()
        check(lib, lib.ucm_hash_blocks(ns, None, toks, len(tokens), T, hashes, 3, C.byref(nb)), "hash")
        assert nb.value == 3
        # Independent hash chain (spec §4.1) with hashlib.
        h = hashlib.md5(b"ucm.hash.v1" + bytes(ns)).digest()
        for b in range(3):
            h = hashlib.md5(h + struct.pack(f"<{T}I", *tokens[b * T:(b + 1) * T])).digest()
            assert bytes(hashes[b * 16:(b + 1) * 16]) == h, f"hash of block {b} differs from hashlib"

        parents = (C.c_uint8 * (16 * 3))()
        root = hashlib.md5(b"ucm.hash.v1" + bytes(ns)).digest()
        parents[0:16] = list(root)
        parents[16:48] = list(bytes(hashes)[0:32])
        bufs = [C.create_string_buffer(payload(i), PAYLOAD) for i in range(3)]
        kv = (C.c_void_p * 3)(*[C.cast(b, C.c_void_p) for b in bufs])
        task = C.c_void_p()
        check(lib, lib.ucm_store_dump(w, ns, hashes, parents, 3, kv, C.byref(task)), "dump")
        check(lib, lib.ucm_task_wait(task, -1), "dump wait")
        lib.ucm_task_free(task)

        r = open_store(lib, store_path, UCM_OPEN_READ_ONLY)
        found = (C.c_uint8 * 16)()
        check(lib, lib.ucm_store_namespace_find(r, b"py", found, None, 0, None), "find")
        assert bytes(found) == bytes(ns)
        # A server chains from the namespace's hash seed (spec §7.1); for a namespace that was not
        # dtype-converted it is the namespace id, so the chain equals the writer's.
        seed = (C.c_uint8 * 16)()
        check(lib, lib.ucm_store_namespace_hash_seed(r, found, seed), "hash seed")
        assert bytes(seed) == bytes(ns)
        again = (C.c_uint8 * (16 * 3))()
        check(lib, lib.ucm_hash_blocks(seed, None, toks, len(tokens), T, again, 3, C.byref(nb)), "rehash")
        assert bytes(again) == bytes(hashes)
        present = (C.c_uint8 * 3)()
        prefix = C.c_size_t()
        check(lib, lib.ucm_store_lookup(r, ns, hashes, 3, present, C.byref(prefix)), "lookup")
        assert prefix.value == 3 and list(present) == [1, 1, 1]

        # Tensor-parallel rank 1 of 2: heads [2, 4), contiguous.
        n = 3
        per = PAYLOAD // 2
        dst = [C.create_string_buffer(per) for _ in range(n)]
        ptrs = (C.c_void_p * n)(*[C.cast(d, C.c_void_p) for d in dst])
        check(lib, lib.ucm_store_load(r, ns, hashes, n, UCM_DEST_CONTIGUOUS, ptrs, 2, 4, C.byref(task)), "load")
        check(lib, lib.ucm_task_wait(task, 10000), "load wait")
        lib.ucm_task_free(task)
        for i in range(n):
            assert dst[i].raw == heads_slice(payload(i), 2, 4), f"block {i}: bytes differ"

        # Paged: one page per (block, layer, K/V), heads [0, 1).
        page = T * 1 * D * S
        pages = [C.create_string_buffer(page) for _ in range(n * L * 2)]
        pptrs = (C.c_void_p * len(pages))(*[C.cast(p, C.c_void_p) for p in pages])
        check(lib, lib.ucm_store_load(r, ns, hashes, n, UCM_DEST_PAGED, pptrs, 0, 1, C.byref(task)), "paged load")
        check(lib, lib.ucm_task_wait(task, 10000), "paged wait")
        lib.ucm_task_free(task)
        for i in range(n):
            got = b"".join(pages[(i * L + l) * 2 + kv].raw for l in range(L) for kv in range(2))
            assert got == heads_slice(payload(i), 0, 1), f"paged block {i}: bytes differ"

        # A miss is a per-block NOT_FOUND; the destination is left alone.
        miss = (C.c_uint8 * 16)(*([7] * 16))
        sentinel = C.create_string_buffer(b"\xAB" * per, per)
        one = (C.c_void_p * 1)(C.cast(sentinel, C.c_void_p))
        check(lib, lib.ucm_store_load(r, ns, miss, 1, UCM_DEST_CONTIGUOUS, one, 2, 4, C.byref(task)), "load miss")
        assert lib.ucm_task_wait(task, -1) == UCM_E_NOT_FOUND
        assert lib.ucm_task_block_status(task, 0) == UCM_E_NOT_FOUND
        lib.ucm_task_free(task)
        assert sentinel.raw == b"\xAB" * per

        need = C.c_size_t()
        assert lib.ucm_store_metrics(r, None, 0, C.byref(need)) == UCM_E_INVALID
        mbuf = C.create_string_buffer(need.value + 1)
        check(lib, lib.ucm_store_metrics(r, mbuf, len(mbuf), C.byref(need)), "metrics")
        text = mbuf.value.decode()
        for want in ("ucm_lookups_total 3", "ucm_blocks_loaded_total 6", "# TYPE ucm_load_task_seconds histogram"):
            assert want in text, f"metrics lack {want!r}"
        check(lib, lib.ucm_store_refresh(r), "refresh")
        lib.ucm_store_close(r)
        lib.ucm_store_close(w)
        # RocksDB's info log (at debug) came through the callback, never to stdout.
        assert any(m.startswith("ucm.rocksdb: ") and lvl == 0 for lvl, m in messages), messages[:5]
        lib.ucm_log_set_callback(LOG_CB(), None, 1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("test_ctypes: OK")


if __name__ == "__main__":
    main()
