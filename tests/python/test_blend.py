"""ucm.blend through the package: rope_shift against a rotation written here (rotate_half, float64
angles), and the selections' rankings and errors (ucm/blend.h)."""
import math

import numpy as np
import pytest

import ucm


def rotate(k, pos, theta, d):
    """Reference RoPE rotation by pos positions of one head's key (rotate_half convention)."""
    half = d // 2
    out = k.astype(np.float64).copy()
    for i in range(half):
        a = pos * theta ** (-2.0 * i / d)
        c, s = math.cos(a), math.sin(a)
        x, y = k[i], k[i + half]
        out[i], out[i + half] = x * c - y * s, x * s + y * c
    return out


def test_rope_shift_matches_the_rotation():
    rng = np.random.default_rng(3)
    D, H, n = 16, 2, 5
    rope = ucm.RopeParams.default(head_dim=D, theta=100000.0)
    keys = rng.standard_normal((n, H * D)).astype(np.float32)
    want = np.stack([np.concatenate([rotate(keys[t, h * D:(h + 1) * D], 37, 100000.0, D) for h in range(H)])
                     for t in range(n)])
    ucm.rope_shift(rope, keys, H, 37)
    assert np.allclose(keys, want, atol=1e-5)
    ucm.rope_shift(rope, keys, H, -37)  # and back
    with pytest.raises(ucm.Invalid):
        ucm.rope_shift(rope, np.zeros((2, H * D), np.float64), H, 1)
    odd = ucm.RopeParams.default(head_dim=7)
    with pytest.raises(ucm.Invalid):
        ucm.rope_shift(odd, np.zeros((2, 14), np.float32), 2, 1)


def test_selections():
    rng = np.random.default_rng(5)
    n, row = 40, 6
    stored = rng.standard_normal((n, row)).astype(np.float32)
    fresh = stored.copy()
    fresh[[3, 17, 30]] += 5.0
    idx, dev = ucm.blend_select(stored, fresh, 0.075)  # ceil(0.075 * 40) = 3
    assert idx.tolist() == [3, 17, 30]
    assert np.allclose(dev, ((stored - fresh) ** 2).sum(1))
    rel = np.zeros(n, np.float32)
    rel[[5, 9]] = 1.0
    idx, score = ucm.blend_select_relevant(n, relevance=rel, ratio=0.05, position_decay=0)  # no rows: 2 by relevance
    assert idx.tolist() == [5, 9]
    idx, _ = ucm.blend_select_relevant(n, stored=stored, fresh=fresh, doc_pos=np.arange(n), ratio=0.025,
                                       position_decay=4.0)
    assert idx.tolist() == [3]  # the prior favours the early token
    with pytest.raises(ucm.Invalid):
        ucm.blend_select(stored, fresh, 1.5)
    with pytest.raises(ucm.Invalid):
        ucm.blend_select_relevant(n, stored=stored, relevance=rel)


def test_ctypes_structs_match_the_library():
    """Every struct the package mirrors has the library's size (the defaults calls set struct_size =
    sizeof in C), and the blend structs carry 0.6's uint32 struct_size and int32 scaling."""
    import ctypes as C
    from ucm import _lib as L
    lib = L.lib()
    for fn, cls in [("ucm_store_default_open_params", L.OpenParams), ("ucm_store_default_load_params", L.LoadParamsC),
                    ("ucm_retriever_default_params", L.RetrieverParamsC),
                    ("ucm_rope_default_params", L.RopeParamsC),
                    ("ucm_blend_select_default_params", L.BlendSelectParamsC)]:
        assert getattr(lib, fn)().struct_size == C.sizeof(cls), fn
    assert dict(L.RopeParamsC._fields_)["struct_size"] is C.c_uint32
    assert dict(L.RopeParamsC._fields_)["scaling"] is C.c_int32
    assert dict(L.BlendSelectParamsC._fields_)["struct_size"] is C.c_uint32
    rope = lib.ucm_rope_default_params()
    assert (rope.theta, rope.scaling, rope.factor) == (10000.0, 0, 1.0)
