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
