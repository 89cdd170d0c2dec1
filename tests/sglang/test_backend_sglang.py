"""ucm.sglang.backend.UcmHiCacheStorage inside SGLang's own HiCache pieces (sglang 0.5.23 on CPU):
built by SGLang's StorageBackendFactory through the `dynamic` route, SGLang's MHATokenToKVPoolHost
in each layout ucm reads, keys from SGLang's own get_hash_str over a real precomputed store's
documents (SmolLM2-135M-Instruct, python3.11-doc pages): the pages read into the host pool equal
ucm's payload for those tokens byte for byte, at TP 1 and on every rank of TP 3 (3 KV heads);
misses and bad calls answer as misses, never raise; pages written from SGLang's host pool
(batch_set_v1, and the generic batch_set with get_data_page) are read back by a later backend
into another pool, in another layout, bit for bit.

Not in CI (needs .venv-sglang: scripts/venv_sglang.sh). Run by scripts/test_sglang.sh, or:
    UCM_SGLANG_STORE=/path/store PYTHONPATH=lib/python UCM_LIB=build/lib/libucm.so \
      .venv-sglang/bin/python -m pytest tests/sglang/test_backend_sglang.py
UCM_SGLANG_STORE: a store precomputed by `ucm precompute` (bf16) whose SGLang page table for page
size 64 was built (`ucm sglang-pages STORE --page-size 64`); scripts/test_sglang.sh makes one. The
tests write pages into it (it becomes format 5): give them a scratch copy, as the script does."""
import logging
import os
from pathlib import Path

import numpy as np
import pytest
import torch

import ucm
from ucm.sglang.backend import UcmHiCacheStorage

hs = pytest.importorskip("sglang.srt.mem_cache.hicache_storage")
from sglang.srt.mem_cache.device_pool_info import KVBufferLayout, KVBuffers, MHABufferInfo  # noqa: E402
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost  # noqa: E402
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory  # noqa: E402
from sglang.srt.mem_cache.utils import get_hash_str  # noqa: E402

STORE = os.environ.get("UCM_SGLANG_STORE")
# SGLang's model_name is its --model-path: the directory whose fingerprint picks the namespace.
MODEL = os.environ.get("UCM_MODEL_DIR") or str(Path(__file__).resolve().parents[2] / "models" / "SmolLM2-135M-Instruct")
pytestmark = pytest.mark.skipif(not STORE, reason="UCM_SGLANG_STORE is not set (scripts/test_sglang.sh sets it)")
P = 64
LAYOUTS = ["page_first", "layer_first", "page_first_direct", "page_head"]


def storage_config(tp_rank=0, tp_size=1, mla=False, **extra):
    ex = {"backend_name": "ucm", "module_path": "ucm.sglang.backend", "class_name": "UcmHiCacheStorage",
          "interface_v1": 1, "store": STORE}
    ex.update(extra)
    return hs.HiCacheStorageConfig(tp_rank=tp_rank, tp_size=tp_size, pp_rank=0, pp_size=1, attn_cp_rank=0,
                                   attn_cp_size=1, is_mla_model=mla, enable_storage_metrics=False,
                                   is_page_first_layout=True, model_name=MODEL, extra_config=ex)


def host_pool(ns, layout, heads, pages=40):
    """SGLang's own host pool on CPU (docs/sglang_0.5.23_hicache_facts.md §4, 'Recipe')."""
    L, H, D = ns.num_layers, heads, ns.head_dim
    T = pages * P
    k = tuple(torch.zeros(T, H, D, dtype=torch.bfloat16) for _ in range(L))
    v = tuple(torch.zeros(T, H, D, dtype=torch.bfloat16) for _ in range(L))
    ptrs = lambda ts: torch.tensor([t.data_ptr() for t in ts], dtype=torch.uint64)  # noqa: E731
    info = MHABufferInfo(buffers=KVBuffers(k=k, v=v, k_data_ptrs=ptrs(k), v_data_ptrs=ptrs(v), layout=KVBufferLayout.NHD),
                         page_size=P, head_num=H, head_dim=D, v_head_dim=D, dtype=torch.bfloat16,
                         device=torch.device("cpu"))
    hp = MHATokenToKVPoolHost(info, 1.0, 0, P, layout, pin_memory=False, device="cpu", device_capacity_tokens=T,
                              start_layer=0, end_layer=L)
    hp.kv_buffer.fill_(7)  # what a load must overwrite
    return hp


def rank_backend(ns, layout, tp):
    """TP rank tp = (rank, size): its KV heads (all of them at TP 1, else one), SGLang's host pool of
    them in `layout`, and the backend SGLang's factory builds for the rank with that pool registered."""
    rank, size = tp
    heads = (0, ns.num_kv_heads) if size == 1 else (rank, rank + 1)
    hp = host_pool(ns, layout, heads[1] - heads[0])
    be = StorageBackendFactory.create_backend("dynamic", storage_config(rank, size), hp)
    be.register_mem_pool_host(hp)
    return heads, hp, be


def host_page(hp, first, layout, L):
    """The host pool's page at slot `first` as [2][L][P][H][D], read by plain indexing of kv_buffer
    (the dims of sglang 0.5.23's init_kv_buffer), independent of the backend's pointer math."""
    b = hp.kv_buffer
    if layout == "layer_first":
        return b[:, :, first:first + P]
    if layout == "page_first":
        return b[:, first:first + P].permute(0, 2, 1, 3, 4)
    if layout == "page_first_direct":
        return b[:, first // P]
    return b[:, first // P].permute(0, 3, 2, 1, 4)  # page_head: (2, H, P, L, D)


@pytest.fixture(scope="module")
def corpus():
    """(namespace, [(document id, token ids, block hashes)]) of the store's documents."""
    import json
    import subprocess
    ucm_bin = os.environ.get("UCM_BIN", "build/bin/ucm")
    out = json.loads(subprocess.run([ucm_bin, "inspect", STORE, "--docs", "--json"], capture_output=True, text=True,
                                    check=True).stdout)
    docs = []
    with ucm.Store(STORE) as s:
        ns = s.namespace(next(d["id"] for d in s.namespaces()
                                 if d.get("hash_scheme", "md5-chain-v1") == "md5-chain-v1"))
        for d in out["docs"]:       # each registered document's chain, from the ids its blocks hold
            last = bytes.fromhex(d["last_block"])
            ids = s.tokens(ns, last)
            hashes = ucm.hash_blocks(ns.hash_seed, ids, ns.block_size)
            assert hashes[-1].tobytes() == last
            docs.append((d["id"], [int(t) for t in ids], hashes))
    return ns, docs


def ucm_payload(ns, hashes, heads):
    """ucm's own payload of blocks `hashes`, heads [h0, h1): [n][L][2][T][h][D] bf16 as uint16."""
    with ucm.Store(STORE) as s:
        out = np.zeros((len(hashes), ns.num_layers, 2, ns.block_size, heads[1] - heads[0], ns.head_dim),
                       dtype=np.uint16)
        st = s.load(ns, hashes, out, heads=heads)
        assert (st == 0).all()
    return out


def check_pages(ns, hp, layout, keys_hashes, firsts, heads):
    k = P // ns.block_size
    for (key, hashes), first in zip(keys_hashes, firsts):
        want = ucm_payload(ns, hashes, heads)                          # [k][L][2][T][h][D]
        want = want.transpose(2, 1, 0, 3, 4, 5).reshape(2, ns.num_layers, k * ns.block_size, heads[1] - heads[0],
                                                        ns.head_dim)  # [2][L][P][h][D]
        got = host_page(hp, first, layout, ns.num_layers).contiguous().view(torch.uint16).numpy()
        assert np.array_equal(got, want), f"page {key[:12]} ({layout}, heads {heads})"


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("tp", [(0, 1), (0, 3), (1, 3), (2, 3)])
def test_pages_read_into_sglangs_host_pool_equal_ucms_payload(corpus, layout, tp):
    ns, docs = corpus
    heads, hp, be = rank_backend(ns, layout, tp)
    assert isinstance(be, UcmHiCacheStorage) and isinstance(be, hs.HiCacheStorage)
    k = P // ns.block_size
    doc_id, ids, hashes = max(docs, key=lambda d: len(d[1]))
    keys = get_hash_str(ids[:len(ids) // P * P], None, page_size=P)      # SGLang's own keys
    n = min(len(keys), 30)
    keys = keys[:n]
    assert be.batch_exists(keys) == n
    idx = hp.alloc(n * P)
    assert idx is not None
    got = be.batch_get_v1(keys, idx)
    assert got == [True] * n
    firsts = idx.reshape(n, P)[:, 0].tolist()
    check_pages(ns, hp, layout, [(keys[i], hashes[i * k:(i + 1) * k]) for i in range(n)], firsts, heads)
    be.close()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_generic_path_fills_sglangs_flat_pages(corpus, layout):
    """Without interface_v1 SGLang calls batch_get with get_dummy_flat_data_page() targets and copies
    them in with set_from_flat_data_page (cache_controller _generic_page_get)."""
    ns, docs = corpus
    hp = host_pool(ns, layout, ns.num_kv_heads)
    be = StorageBackendFactory.create_backend("dynamic", storage_config(interface_v1=0), hp)
    be.register_mem_pool_host(hp)
    _, ids, hashes = docs[0]
    keys = get_hash_str(ids[:len(ids) // P * P], None, page_size=P)[:3]
    targets = [hp.get_dummy_flat_data_page() for _ in keys]
    res = be.batch_get(keys, targets)
    assert all(r is not None for r in res)
    idx = hp.alloc(len(keys) * P)
    firsts = idx.reshape(len(keys), P)[:, 0].tolist()
    for first, page in zip(firsts, res):
        hp.set_from_flat_data_page(first, page)
    k = P // ns.block_size
    check_pages(ns, hp, layout, [(keys[i], hashes[i * k:(i + 1) * k]) for i in range(len(keys))], firsts,
                (0, ns.num_kv_heads))
    be.close()


def test_misses_and_bad_calls_never_raise(corpus, caplog):
    ns, docs = corpus
    hp = host_pool(ns, "page_first", ns.num_kv_heads)
    be = StorageBackendFactory.create_backend("dynamic", storage_config(), hp)
    be.register_mem_pool_host(hp)
    _, ids, _ = docs[0]
    keys = get_hash_str(ids[:2 * P], None, page_size=P)
    unknown = get_hash_str(list(range(5, 5 + 2 * P)), None, page_size=P)
    assert be.batch_exists(keys + unknown) == 2
    assert be.batch_exists(unknown + keys) == 0
    assert be.exists(keys[0]) and not be.exists(unknown[0])
    idx = hp.alloc(4 * P)
    assert be.batch_get_v1(unknown + keys, idx) == [False, False, True, True]
    with caplog.at_level(logging.WARNING, logger="ucm.sglang"):
        assert be.batch_get_v1(keys, idx[:P]) == [False, False]          # indices for 1 page, 2 keys
        assert be.batch_get_v1(["zz"] * 2, idx[:2 * P]) == [False, False]  # not hex
        assert be.batch_exists(["not a key"]) == 0
    assert be.get(unknown[0], hp.get_dummy_flat_data_page()) is None
    assert be.batch_set_v1(keys, idx[:P]) == [False, False]                # indices for one page
    assert be.counters()["errors"] >= 3
    be.close()


def test_storage_metrics_through_sglangs_collector(corpus):
    """With --enable-storage-metrics SGLang's scheduler (unified_radix_cache.py, 0.5.23) takes
    get_stats(), sets .prefetch_stats on it and hands it to StorageMetricsCollector, which asserts a
    StorageMetrics: the same steps here, then the histograms in prometheus_client's registry."""
    prometheus_client = pytest.importorskip("prometheus_client")
    from sglang.srt.observability.metrics_collector import StorageMetrics, StorageMetricsCollector
    ns, docs = corpus
    hp = host_pool(ns, "page_first", ns.num_kv_heads)
    be = StorageBackendFactory.create_backend("dynamic", storage_config(), hp)
    be.register_mem_pool_host(hp)
    _, ids, _ = docs[0]
    keys = get_hash_str(ids[:3 * P], None, page_size=P)
    idx = hp.alloc(3 * P)
    assert be.batch_get_v1(keys, idx) == [True] * 3
    assert be.batch_get_v1(keys[:1], idx[:P]) == [True]
    labels = {"storage_backend": "dynamic", "tp_rank": 0, "dp_rank": 0, "pp_rank": 0, "pp_size": 1,
              "attn_cp_rank": 0, "attn_cp_size": 1}
    collector = StorageMetricsCollector(labels)
    m = be.get_stats()                                   # the scheduler's lines
    if m is None:
        m = StorageMetrics()
    if not hasattr(m, "prefetch_stats"):
        m.prefetch_stats = {}
    assert isinstance(m, StorageMetrics) and m.prefetch_pgs == [3, 1] and m.backup_pgs == []
    assert all(bw > 0 for bw in m.prefetch_bandwidth)
    collector.log_storage_metrics(m)
    lab = {k: str(v) for k, v in labels.items()}
    reg = prometheus_client.REGISTRY
    assert reg.get_sample_value("sglang:prefetch_pgs_count", lab) == 2
    assert reg.get_sample_value("sglang:prefetch_pgs_sum", lab) == 4
    assert reg.get_sample_value("sglang:prefetch_bandwidth_count", lab) == 2
    assert be.get_stats().prefetch_pgs == []              # each call since the last
    be.close()


def test_refused_at_construction_with_a_message():
    with pytest.raises(ValueError, match="MLA"):
        UcmHiCacheStorage(storage_config(mla=True), {})
    with pytest.raises(ValueError, match="does not divide"):
        UcmHiCacheStorage(storage_config(0, 2), {})                     # 3 KV heads over TP 2
    be = UcmHiCacheStorage(storage_config(), {})                        # a hybrid model's pools
    be.register_mem_host_pool_v2(object(), hs.PoolName.KV)
    be.register_mem_host_pool_v2(object(), hs.PoolName.MAMBA)
    with pytest.raises(ValueError, match="hybrid"):
        be.on_host_pools_registered()
    be.close()
    cfg = storage_config()
    cfg.extra_config.pop("store")
    os.environ.pop("UCM_STORE", None)
    with pytest.raises(ValueError, match="no store"):
        UcmHiCacheStorage(cfg, {})


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("tp", [(0, 1), (2, 3)])
def test_pages_written_from_sglangs_pool_are_read_back(corpus, layout, tp):
    ns, _ = corpus
    rank, size = tp
    heads, hp, be = rank_backend(ns, layout, tp)
    g = torch.Generator().manual_seed(LAYOUTS.index(layout) * 7 + size)
    hp.kv_buffer.copy_(torch.randn(hp.kv_buffer.shape, generator=g).to(torch.bfloat16))
    salt = LAYOUTS.index(layout) * 10 + size
    keys = get_hash_str([(13 * j + salt) % 49000 for j in range(3 * P)], None, page_size=P)  # SGLang's own keys
    idx = hp.alloc(3 * P)
    assert be.batch_exists(keys) == 0
    assert be.batch_set_v1(keys, idx) == [True] * 3
    be.close()
    layout2 = LAYOUTS[(LAYOUTS.index(layout) + 1) % len(LAYOUTS)]
    hp2 = host_pool(ns, layout2, heads[1] - heads[0])
    be2 = StorageBackendFactory.create_backend("dynamic", storage_config(rank, size), hp2)
    be2.register_mem_pool_host(hp2)
    assert be2.batch_exists(keys) == 3
    hp2.alloc(5 * P)                              # elsewhere in the pool
    idx2 = hp2.alloc(3 * P)
    assert be2.batch_get_v1(keys, idx2) == [True] * 3
    for a, b in zip(idx.reshape(3, P)[:, 0].tolist(), idx2.reshape(3, P)[:, 0].tolist()):
        assert torch.equal(host_page(hp2, b, layout2, ns.num_layers), host_page(hp, a, layout, ns.num_layers))
    # The generic path: SGLang's flat pages in (batch_set), flat pages out (batch_get).
    keys3 = get_hash_str([(17 * j + salt) % 49000 for j in range(2 * P)], None, page_size=P)
    flats = [hp2.get_data_page(int(i), flat=True).clone() for i in idx2.reshape(3, P)[:2, 0].tolist()]
    assert be2.batch_set(keys3, flats) is True
    got = be2.batch_get(keys3, [hp2.get_dummy_flat_data_page() for _ in keys3])
    assert all(x is not None for x in got)
    for f, x in zip(flats, got):
        assert torch.equal(f.view(torch.int16), x.view(torch.int16))
    be2.close()
