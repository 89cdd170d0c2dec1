"""Store.load_device (ucm_store_load_ex into a paged KV cache in GPU memory) through the package.

Run by ctest with UCM_CUDA_PLUGIN naming the host-run stand-in of libucm_cuda.so
(tests/kernels/fake_cuda_plugin.cc), whose "device memory" is host memory: numpy arrays stand for
vLLM's per-layer caches, so the bytes are checked here against the payload layout of store_v1.md
§4.2 by hand: NHD and HND pages, a TP head range, skipped slots, the per-layer callback and
events. Without the plugin variable (on a GPU machine) the test skips.
"""
import os

import numpy as np
import pytest

import ucm
from test_store import DESC, H, L, T, D, S, filled, heads_slice, payload  # noqa: F401 (fixture)

pytestmark = pytest.mark.skipif(not os.environ.get("UCM_CUDA_PLUGIN"), reason="needs UCM_CUDA_PLUGIN (the fake)")


def page_of(p, l, kv, h0, h1, layout):
    """Block p's (layer l, K|V) page for heads [h0, h1) as [T][h][D] or [h][T][D] bytes."""
    x = np.frombuffer(heads_slice(p, h0, h1), dtype=np.uint8).reshape(L, 2, T, h1 - h0, D * S)[l, kv]
    return (x if layout == "NHD" else x.transpose(1, 0, 2)).tobytes()


@pytest.mark.parametrize("layout,heads", [("NHD", None), ("NHD", (1, 3)), ("HND", None), ("HND", (2, 4))])
def test_load_device_places_pages(filled, layout, heads):  # noqa: F811
    path, ns, _, hashes = filled
    assert ucm.cuda_device_count() == 1
    h0, h1 = heads or (0, H)
    page = T * (h1 - h0) * D * S
    caches = [np.full(5 * page, 0xA5, dtype=np.uint8) for _ in range(L * 2)]
    events = [np.zeros(1, dtype=np.int32) for _ in range(L)]  # the fake's events are int counters
    calls = []
    slots = [4, -1, 0]
    with ucm.Store(path) as r:
        st = r.load_device(ns, hashes, [c.ctypes.data for c in caches], slots, heads=heads, layout=layout,
                           layer_events=[e.ctypes.data for e in events],
                           on_layer=lambda layer, status: calls.append((layer, status)))
    assert list(st) == [0, 0, 0]
    assert calls == [(l, 0) for l in range(L)]
    assert all(int(e[0]) == 1 for e in events)
    for l in range(L):
        for kv in range(2):
            mem = caches[l * 2 + kv]
            for i, s in enumerate(slots):
                if s >= 0:
                    assert mem[s * page:(s + 1) * page].tobytes() == page_of(payload(i), l, kv, h0, h1, layout)
            for s in (1, 2, 3):  # slots nobody loaded
                assert (mem[s * page:(s + 1) * page] == 0xA5).all()


def test_load_device_errors(filled):  # noqa: F811
    path, ns, _, hashes = filled
    with ucm.Store(path) as r:
        with pytest.raises(ucm.Invalid):
            r.load_device(ns, hashes, [0] * 3, [0, 1, 2])  # not L * 2 caches
        with pytest.raises(ucm.Invalid):
            r.load_device(ns, hashes, [np.zeros(1 << 16, np.uint8).ctypes.data] * (L * 2), [0, 1])
        with pytest.raises(ucm.NotSupported):
            r.load_device(ns, hashes, [np.zeros(1 << 16, np.uint8).ctypes.data] * (L * 2), [0, 1, 2], device=5)
