"""ucm.retrieval through the package: defaults and configs/retrieval.yaml, ReprInfo of a
namespace registered with representations, load_repr's per-block NOT_FOUND for blocks dumped
without them, then every policy on a small random request against a brute-force reference
written here (the rules of ucm/retrieval.h)."""
import math
import random
from pathlib import Path

import numpy as np
import pytest

import ucm

ESA, QUEST, GSA, PSA = ucm.POLICY_ESA, ucm.POLICY_QUEST, ucm.POLICY_GSA, ucm.POLICY_PSA
CONFIG = Path(__file__).resolve().parents[2] / "configs" / "retrieval.yaml"


def test_params_defaults_and_yaml(tmp_path):
    d = ucm.RetrieverParams.default()
    assert (d.policy, d.sink_blocks, d.local_blocks, d.min_blocks, d.reuse_steps) == (QUEST, 1, 2, 4, 1)
    assert ucm.RetrieverParams.load(str(CONFIG)) == d
    bad = tmp_path / "bad.yaml"
    bad.write_text("sink_blockz: 3\n")
    with pytest.raises(ucm.Invalid) as e:
        ucm.RetrieverParams.load(str(bad))
    assert "sink_blockz" in str(e.value)
    with pytest.raises(ucm.IO):
        ucm.RetrieverParams.load(str(tmp_path / "missing.yaml"))


def test_repr_info_and_load_repr(tmp_path):
    L, H, D, T, B = 2, 2, 8, 4, 16
    desc = {"model_id": "py-retr", "weights_digest": "00", "dtype": "bf16", "block_size": T, "num_layers": L,
            "num_kv_heads": H, "head_dim": D, "name": "retr",
            "extra": {"hash_bits": B, "dense_layers": [1], "repr": ["R0", "R1", "R4"]}}
    with ucm.Store(str(tmp_path / "s"), mode="c") as s:
        ns = s.register_namespace(desc)
        info = s.repr_info(ns)
        assert (info.num_layers, info.num_kv_heads, info.head_dim, info.block_size, info.hash_bits) == (L, H, D, T, B)
        assert info.dtype == ucm.DTYPE_BF16 and info.sections == 7 and info.dense_layers == 2
        hashes = ucm.hash_blocks(ns.hash_seed, list(range(2 * T)), T)
        kv = np.zeros((2, L * 2 * T * H * D), dtype=np.uint16)
        assert s.dump(ns, hashes, ucm.parents_of(ns.hash_seed, hashes), kv).tolist() == [0, 0]
        bufs = ucm.ReprBuffers(info, 3, sections=ucm.REPR_R0)
        bufs.r0[:] = -7.0
        st = s.load_repr(ns, hashes, bufs, first=1)
        assert st.tolist() == [ucm.NotFound.code] * 2  # dumped through the C ABI: no representations
        assert (bufs.r0 == -7.0).all(), "a block without representations touched its slots"
        with pytest.raises(ucm.Invalid) as e:
            s.load_repr(ns, hashes, bufs, first=2)  # 2 + 2 > capacity 3
        assert "capacity" in str(e.value)


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



def test_every_policy_against_the_reference():
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
    info = ucm.ReprInfo(L, H, D, T, B, ucm.DTYPE_BF16, 7, 0)
    bufs = ucm.ReprBuffers(info, Cap)
    bufs.r0[:] = np.array(R["r0"], dtype=np.float32)
    bufs.r1[:] = np.array(R["r1"], dtype=np.float32)
    bufs.r4[:] = np.array(R["r4"], dtype=np.uint8)
    proj = np.array(R["proj"], dtype=np.float32)
    compared = 0
    for policy in (ESA, QUEST, GSA, PSA):
        p = ucm.RetrieverParams.default()
        p.policy, p.shared_heads, p.sparse_ratio, p.psa_tau = policy, 0, 0.25, 0.7
        pc = p.to_c()
        pf = {k: getattr(pc, k) for k in ucm.RetrieverParams._FIELDS}
        with ucm.Retriever(info, p, proj) as ret:
            for step in range(12):
                l, n = rng.randrange(L), rng.randint(1, Cap)
                valid = [1 if rng.random() > 0.15 else 0 for _ in range(n)]
                q = [float(ri(-4, 4)) for _ in range(H * G * D)]
                got = ret.select(l, np.array(q, dtype=np.float32).reshape(H * G, D), bufs, n, group_size=G,
                                 valid=np.array(valid, dtype=np.uint8))
                want, margin = reference(pf, R, l, q, n, valid)
                if margin < 1e-4:
                    continue
                compared += 1
                assert [g.tolist() for g in got] == want, f"policy {policy} step {step}"
    assert compared >= 40, compared
    with ucm.Retriever(info) as ret:
        with pytest.raises(ucm.Invalid) as e:  # n_q_heads not G x heads
            ret.select(0, np.zeros((3, D), np.float32), bufs, 4, group_size=G)
        assert "n_q_heads" in str(e.value)
        ret.reset()


def _bf16(x):
    """float32 -> bfloat16 bit patterns, round to nearest even (the reference rounding)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _bf16_f32(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


def test_repr_encode_and_dump_repr_serve_load_repr(tmp_path):
    """A server's block with representations (ucm_repr_encode + ucm_store_dump_repr) loads back as
    R0 = mean key (bf16 RNE), R1 = bounds containing every key, R4 = the sign bits of k . P, all
    computed here with numpy."""
    L, H, D, T, B = 2, 2, 8, 4, 16
    desc = {"model_id": "py-enc", "weights_digest": "01", "dtype": "bf16", "block_size": T, "num_layers": L,
            "num_kv_heads": H, "head_dim": D, "name": "enc",
            "extra": {"hash_bits": B, "dense_layers": [], "repr": ["R0", "R1", "R4"]}}
    rng = np.random.default_rng(11)
    keys = rng.standard_normal((2, L, T, H, D)).astype(np.float32)   # two blocks
    proj = rng.standard_normal((L, H, D, B)).astype(np.float32)
    with ucm.Store(str(tmp_path / "s"), mode="c") as s:
        ns = s.register_namespace(desc)
        info = s.repr_info(ns)
        reprs = [ucm.repr_encode(info, keys[i], proj) for i in range(2)]
        assert reprs[0].tobytes()[:4] == b"UCMP"
        hashes = ucm.hash_blocks(ns.hash_seed, list(range(2 * T)), T)
        kv = np.zeros((2, L * 2 * T * H * D), dtype=np.uint16)
        st = s.dump(ns, hashes, ucm.parents_of(ns.hash_seed, hashes), kv, reprs=reprs)
        assert st.tolist() == [0, 0]
        bufs = ucm.ReprBuffers(info, 2)
        assert s.load_repr(ns, hashes, bufs).tolist() == [0, 0]
        for i in range(2):
            k = keys[i]                                                  # [L][T][H][D]
            r0 = _bf16_f32(_bf16(k.astype(np.float64).mean(axis=1).astype(np.float32)))   # [L][H][D]
            assert np.array_equal(bufs.r0[:, :, i], r0)
            lo, hi = bufs.r1[:, :, i, 0], bufs.r1[:, :, i, 1]
            assert (lo <= k.min(axis=1)).all() and (hi >= k.max(axis=1)).all()
            mn, mx = k.min(axis=1), k.max(axis=1)   # tight: at most one bf16 step outward
            assert (mn - lo <= np.abs(mn) * 2.0 ** -7 + 1e-30).all() and (hi - mx <= np.abs(mx) * 2.0 ** -7 + 1e-30).all()
            dots = np.einsum("lthd,lhdb->lhtb", k.astype(np.float64), proj.astype(np.float64))
            bits = np.packbits(dots >= 0, axis=-1, bitorder="little")   # [L][H][T][B/8]
            assert np.array_equal(bufs.r4[:, :, i], bits)
        with pytest.raises(ucm.Invalid):
            ucm.repr_encode(info, keys[0][:, :2], proj)
        with pytest.raises(ucm.Invalid):
            s.dump(ns, hashes, ucm.parents_of(ns.hash_seed, hashes), kv, reprs=reprs[:1])
