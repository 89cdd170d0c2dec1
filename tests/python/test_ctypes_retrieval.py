#!/usr/bin/env python3
"""ucm/retrieval.h through ctypes, the way a Python inference server uses it (stdlib only).

Usage: test_ctypes_retrieval.py [path/to/libucm.so]   (or env UCM_LIB)

Checks the defaults and configs/retrieval.yaml, ucm_store_repr_info on a namespace registered
with representations, ucm_store_load_repr's per-block NOT_FOUND for blocks dumped without them
(the C ABI dump carries none) and its immediate errors, then runs every policy on a small random
request and compares the selected blocks with a brute-force reference written here.
Exits non-zero on the first failure.
"""
import ctypes as C
import hashlib
import json
import math
import os
import random
import shutil
import sys
import tempfile

UCM_OK, UCM_E_NOT_FOUND, UCM_E_INVALID = 0, 1, 3
UCM_OPEN_CREATE = 2
UCM_DTYPE_BF16, UCM_DTYPE_F16, UCM_DTYPE_F32 = 1, 2, 3
UCM_REPR_R0, UCM_REPR_R1, UCM_REPR_R4 = 1, 2, 4
ESA, QUEST, GSA, PSA = 0, 1, 2, 3
CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "configs", "retrieval.yaml")


class OpenParams(C.Structure):
    """ucm_store_open_params (ucm/ucm.h)."""
    _fields_ = [("struct_size", C.c_uint32), ("mode", C.c_int32), ("io_threads", C.c_uint32),
                ("direct_io", C.c_int32), ("refresh_interval_ms", C.c_uint32), ("reader_dir", C.c_char_p)]


class ReprInfo(C.Structure):
    _fields_ = [("struct_size", C.c_uint32), ("num_layers", C.c_uint32), ("num_kv_heads", C.c_uint32),
                ("head_dim", C.c_uint32), ("block_size", C.c_uint32), ("hash_bits", C.c_uint32),
                ("dtype", C.c_int32), ("sections", C.c_uint32), ("dense_layers", C.c_uint64)]


class ReprBuffers(C.Structure):
    _fields_ = [("struct_size", C.c_uint32), ("head_begin", C.c_uint32), ("head_end", C.c_uint32),
                ("dtype", C.c_int32), ("capacity", C.c_size_t), ("r0", C.c_void_p), ("r1", C.c_void_p),
                ("r4", C.POINTER(C.c_uint8))]


class Params(C.Structure):
    _fields_ = [("struct_size", C.c_uint32), ("policy", C.c_int32), ("sink_blocks", C.c_uint32),
                ("local_blocks", C.c_uint32), ("sparse_ratio", C.c_float), ("min_blocks", C.c_uint32),
                ("top_k", C.c_uint32), ("psa_tau", C.c_float), ("psa_max_blocks", C.c_uint32),
                ("reuse_steps", C.c_uint32), ("shared_heads", C.c_int32), ("honor_dense_layers", C.c_int32)]


class Query(C.Structure):
    _fields_ = [("struct_size", C.c_uint32), ("layer", C.c_uint32), ("q", C.c_void_p), ("q_dtype", C.c_int32),
                ("n_q_heads", C.c_uint32), ("group_size", C.c_uint32), ("reprs", C.POINTER(ReprBuffers)),
                ("n_blocks", C.c_size_t), ("valid", C.POINTER(C.c_uint8)), ("top_k", C.c_uint32)]


def load_lib(path):
    lib = C.CDLL(path)
    u8p, vp = C.POINTER(C.c_uint8), C.c_void_p
    sig = {
        "ucm_last_error": (C.c_char_p, []),
        "ucm_code_name": (C.c_char_p, [C.c_int]),
        "ucm_store_default_open_params": (OpenParams, []),
        "ucm_store_open": (C.c_int, [C.c_char_p, C.POINTER(OpenParams), C.POINTER(vp)]),
        "ucm_store_close": (None, [vp]),
        "ucm_store_namespace_register": (C.c_int, [vp, C.c_char_p, u8p]),
        "ucm_hash_blocks": (C.c_int, [u8p, u8p, C.POINTER(C.c_uint32), C.c_size_t, C.c_uint32, u8p, C.c_size_t,
                                      C.POINTER(C.c_size_t)]),
        "ucm_store_dump": (C.c_int, [vp, u8p, u8p, u8p, C.c_size_t, C.POINTER(vp), C.POINTER(vp)]),
        "ucm_task_wait": (C.c_int, [vp, C.c_int]),
        "ucm_task_block_status": (C.c_int, [vp, C.c_size_t]),
        "ucm_task_free": (None, [vp]),
        "ucm_store_repr_info": (C.c_int, [vp, u8p, C.POINTER(ReprInfo)]),
        "ucm_store_load_repr": (C.c_int, [vp, u8p, u8p, C.c_size_t, C.POINTER(ReprBuffers), C.c_size_t, C.POINTER(vp)]),
        "ucm_retriever_default_params": (Params, []),
        "ucm_retriever_params_load": (C.c_int, [C.c_char_p, C.POINTER(Params)]),
        "ucm_retriever_create": (C.c_int, [C.POINTER(Params), C.POINTER(ReprInfo), C.POINTER(C.c_float), C.POINTER(vp)]),
        "ucm_retriever_free": (None, [vp]),
        "ucm_retriever_select": (C.c_int, [vp, C.POINTER(Query), C.POINTER(C.c_uint32), C.c_size_t,
                                           C.POINTER(C.c_uint32), C.POINTER(C.c_uint32)]),
        "ucm_retriever_reset": (None, [vp]),
    }
    for name, (res, args) in sig.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    return lib


def check(lib, rc, what):
    if rc != UCM_OK:
        raise AssertionError(f"{what}: {lib.ucm_code_name(rc).decode()}: {lib.ucm_last_error().decode()}")


def fields(s):
    return {k: getattr(s, k) for k, _ in s._fields_}


def store_part(lib, tmp):
    """repr_info and load_repr against a store written through the C ABI (no representations)."""
    L, H, D, T, B = 2, 2, 8, 4, 16
    h = C.c_void_p()
    op = lib.ucm_store_default_open_params()
    op.mode = UCM_OPEN_CREATE
    check(lib, lib.ucm_store_open(os.path.join(tmp, "s").encode(), C.byref(op), C.byref(h)), "open")
    desc = {"model_id": "py-retr", "weights_digest": "00", "dtype": "bf16", "block_size": T, "num_layers": L,
            "num_kv_heads": H, "head_dim": D, "name": "retr",
            "extra": {"hash_bits": B, "dense_layers": [1], "repr": ["R0", "R1", "R4"]}}
    ns = (C.c_uint8 * 16)()
    check(lib, lib.ucm_store_namespace_register(h, json.dumps(desc).encode(), ns), "register")
    info = ReprInfo(struct_size=C.sizeof(ReprInfo))
    check(lib, lib.ucm_store_repr_info(h, ns, C.byref(info)), "repr_info")
    assert (info.num_layers, info.num_kv_heads, info.head_dim, info.block_size, info.hash_bits) == (L, H, D, T, B)
    assert info.dtype == UCM_DTYPE_BF16 and info.sections == 7 and info.dense_layers == 2, fields(info)
    toks = (C.c_uint32 * (2 * T))(*range(2 * T))
    hashes = (C.c_uint8 * 32)()
    nb = C.c_size_t()
    check(lib, lib.ucm_hash_blocks(ns, None, toks, 2 * T, T, hashes, 2, C.byref(nb)), "hash")
    parents = (C.c_uint8 * 32)()
    parents[0:16] = list(hashlib.md5(b"ucm.hash.v1" + bytes(ns)).digest())
    parents[16:32] = list(bytes(hashes)[0:16])
    pay = [C.create_string_buffer(L * 2 * T * H * D * 2) for _ in range(2)]
    kv = (C.c_void_p * 2)(*[C.cast(p, C.c_void_p) for p in pay])
    task = C.c_void_p()
    check(lib, lib.ucm_store_dump(h, ns, hashes, parents, 2, kv, C.byref(task)), "dump")
    check(lib, lib.ucm_task_wait(task, -1), "dump wait")
    lib.ucm_task_free(task)
    cap = 3
    r0 = (C.c_float * (L * H * cap * D))(*([-7.0] * (L * H * cap * D)))
    bufs = ReprBuffers(struct_size=C.sizeof(ReprBuffers), head_begin=0, head_end=0, dtype=UCM_DTYPE_F32,
                       capacity=cap, r0=C.cast(r0, C.c_void_p))
    check(lib, lib.ucm_store_load_repr(h, ns, hashes, 2, C.byref(bufs), 1, C.byref(task)), "load_repr")
    assert lib.ucm_task_wait(task, -1) == UCM_E_NOT_FOUND
    assert [lib.ucm_task_block_status(task, i) for i in range(2)] == [UCM_E_NOT_FOUND] * 2
    lib.ucm_task_free(task)
    assert all(x == -7.0 for x in r0), "a block without representations touched its slots"
    task = C.c_void_p()
    assert lib.ucm_store_load_repr(h, ns, hashes, 2, C.byref(bufs), 2, C.byref(task)) == UCM_E_INVALID  # 2 + 2 > 3
    assert not task.value and b"capacity" in lib.ucm_last_error()
    bufs.dtype = UCM_DTYPE_F16
    assert lib.ucm_store_load_repr(h, ns, hashes, 1, C.byref(bufs), 0, C.byref(task)) == UCM_E_INVALID
    lib.ucm_store_close(h)


# ---- brute-force reference (ucm/retrieval.h rules) ---------------------------------------------
def budget(p, n):
    ratio = round(p["sparse_ratio"], 6)  # the decimal the user wrote, not the float's expansion
    k = p["top_k"] if p["top_k"] > 0 else max(p["min_blocks"], math.ceil(ratio * n))
    return min(k, n)


def forced(p, c, n, valid):
    return c < p["sink_blocks"] or c + p["local_blocks"] >= n or not valid[c]


def reference(p, R, l, q, n, valid):
    """Per-KV-head sets (shared_heads = 0). Returns (sets, margin)."""
    D, G, B, T = R["D"], R["G"], R["B"], R["T"]
    sets, margin = [], 1e300
    for h in range(R["H"]):
        qs = [q[(h * G + g) * D:(h * G + g + 1) * D] for g in range(G)]

        def bound(c, qv):
            lo, hi = R["r1"][l][h][c]
            return sum(max(x * a, x * b) for x, a, b in zip(qv, lo, hi))

        if p["policy"] == PSA:
            mass = [0.0] * n
            for qv in qs:
                u = {c: bound(c, qv) for c in range(n) if valid[c]}
                if not u:
                    continue
                m = max(u.values())
                e = {c: math.exp((v - m) / math.sqrt(D)) for c, v in u.items()}
                z = sum(e.values())
                for c, v in e.items():
                    mass[c] += v / z / G
            sel = [c for c in range(n) if forced(p, c, n, valid)]
            covered = sum(mass[c] for c in sel)
            cand = sorted((c for c in range(n) if not forced(p, c, n, valid)), key=lambda c: (-mass[c], c))
            cap = min(p["psa_max_blocks"], n) if p["psa_max_blocks"] else budget(p, n)
            margin = min(margin, abs(covered - p["psa_tau"]))
            for c in cand:
                if len(sel) >= cap or covered >= p["psa_tau"]:
                    break
                sel.append(c)
                covered += mass[c]
                margin = min(margin, abs(covered - p["psa_tau"]))
            sets.append(sorted(sel))
            continue
        if p["policy"] == GSA:
            # sign of the mean = sign of the sum; exact in Python integers
            qsum = [int(sum(qs[g][d] for g in range(G))) for d in range(D)]
            P = R["proj"][l][h]
            dots = [sum(qsum[d] * P[d][j] for d in range(D)) for j in range(B)]
            bits = [1 if x >= 0 else 0 for x in dots]
            score = []
            for c in range(n):
                best = min(sum(((R["r4"][l][h][c][t][j // 8] >> (j % 8)) & 1) != bits[j] for j in range(B))
                           for t in range(T))
                score.append(B - best)
        elif p["policy"] == ESA:
            score = [max(sum(a * b for a, b in zip(qv, R["r0"][l][h][c])) for qv in qs) for c in range(n)]
        else:
            score = [max(bound(c, qv) for qv in qs) for c in range(n)]
        sel = [c for c in range(n) if forced(p, c, n, valid)]
        cand = sorted((c for c in range(n) if not forced(p, c, n, valid)), key=lambda c: (-score[c], c))
        sel += cand[:max(0, budget(p, n) - len(sel))]
        sets.append(sorted(sel))
    return sets, margin


def retriever_part(lib):
    rng = random.Random(7)
    L, H, G, D, T, B, Cap = 2, 2, 2, 8, 4, 16, 14
    ri = lambda a, b: rng.randint(a, b)
    R = {"L": L, "H": H, "G": G, "D": D, "T": T, "B": B}
    R["r0"] = [[[[ri(-8, 8) for _ in range(D)] for _ in range(Cap)] for _ in range(H)] for _ in range(L)]
    R["r1"] = []
    for l in range(L):
        per_h = []
        for h in range(H):
            blocks = []
            for c in range(Cap):
                lo = [ri(-8, 8) for _ in range(D)]
                blocks.append((lo, [x + ri(0, 5) for x in lo]))
            per_h.append(blocks)
        R["r1"].append(per_h)
    R["r4"] = [[[[[ri(0, 255) for _ in range(B // 8)] for _ in range(T)] for _ in range(Cap)] for _ in range(H)]
               for _ in range(L)]
    R["proj"] = [[[[ri(-3, 3) for _ in range(B)] for _ in range(D)] for _ in range(H)] for _ in range(L)]
    flat = lambda x: [v for a in x for v in (flat(a) if isinstance(a, (list, tuple)) else [a])]
    r0 = (C.c_float * (L * H * Cap * D))(*flat(R["r0"]))
    r1 = (C.c_float * (L * H * Cap * 2 * D))(*flat(R["r1"]))
    r4 = (C.c_uint8 * (L * H * Cap * T * B // 8))(*flat(R["r4"]))
    proj = (C.c_float * (L * H * D * B))(*flat(R["proj"]))
    bufs = ReprBuffers(struct_size=C.sizeof(ReprBuffers), head_begin=0, head_end=0, dtype=UCM_DTYPE_F32,
                       capacity=Cap, r0=C.cast(r0, C.c_void_p), r1=C.cast(r1, C.c_void_p), r4=r4)
    info = ReprInfo(struct_size=C.sizeof(ReprInfo), num_layers=L, num_kv_heads=H, head_dim=D, block_size=T,
                    hash_bits=B, dtype=UCM_DTYPE_BF16, sections=7, dense_layers=0)
    compared = 0
    for policy in (ESA, QUEST, GSA, PSA):
        p = lib.ucm_retriever_default_params()
        p.policy, p.shared_heads, p.sparse_ratio, p.psa_tau = policy, 0, 0.25, 0.7
        ret = C.c_void_p()
        check(lib, lib.ucm_retriever_create(C.byref(p), C.byref(info), proj, C.byref(ret)), f"create {policy}")
        for step in range(12):
            l, n = rng.randrange(L), rng.randint(1, Cap)
            valid = [1 if rng.random() > 0.15 else 0 for _ in range(n)]
            q = [float(ri(-4, 4)) for _ in range(H * G * D)]
            qa = (C.c_float * len(q))(*q)
            va = (C.c_uint8 * n)(*valid)
            qq = Query(struct_size=C.sizeof(Query), layer=l, q=C.cast(qa, C.c_void_p), q_dtype=UCM_DTYPE_F32,
                       n_q_heads=H * G, group_size=G, reprs=C.pointer(bufs), n_blocks=n, valid=va)
            idx = (C.c_uint32 * (H * n))()
            counts = (C.c_uint32 * H)()
            nsets = C.c_uint32()
            check(lib, lib.ucm_retriever_select(ret, C.byref(qq), idx, n, counts, C.byref(nsets)), "select")
            want, margin = reference(fields(p), R, l, q, n, valid)
            if margin < 1e-4:
                continue
            compared += 1
            got = [list(idx[s * n:s * n + counts[s]]) for s in range(nsets.value)]
            assert got == want, f"policy {policy} step {step}: {got} != {want}"
        lib.ucm_retriever_free(ret)
    assert compared >= 40, compared
    # A bad query: n_q_heads not G x heads.
    ret = C.c_void_p()
    p = lib.ucm_retriever_default_params()
    check(lib, lib.ucm_retriever_create(C.byref(p), C.byref(info), None, C.byref(ret)), "create")
    qa = (C.c_float * (H * G * D))()
    qq = Query(struct_size=C.sizeof(Query), layer=0, q=C.cast(qa, C.c_void_p), q_dtype=UCM_DTYPE_F32,
               n_q_heads=3, group_size=G, reprs=C.pointer(bufs), n_blocks=4, valid=None)
    idx, counts = (C.c_uint32 * 8)(), (C.c_uint32 * 2)()
    assert lib.ucm_retriever_select(ret, C.byref(qq), idx, 4, counts, None) == UCM_E_INVALID
    assert b"n_q_heads" in lib.ucm_last_error()
    lib.ucm_retriever_reset(ret)
    lib.ucm_retriever_free(ret)


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("UCM_LIB", "libucm.so")
    lib = load_lib(path)
    d = lib.ucm_retriever_default_params()
    assert d.struct_size == C.sizeof(Params), (d.struct_size, C.sizeof(Params))
    assert (d.policy, d.sink_blocks, d.local_blocks, d.min_blocks, d.reuse_steps) == (QUEST, 1, 2, 4, 1)
    f = Params()
    check(lib, lib.ucm_retriever_params_load(CONFIG.encode(), C.byref(f)), "params_load")
    assert fields(f) == fields(d), (fields(f), fields(d))
    tmp = tempfile.mkdtemp(prefix="ucm_ctypes_retr_")
    try:
        store_part(lib, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    retriever_part(lib)
    print("test_ctypes_retrieval: OK")


if __name__ == "__main__":
    main()
