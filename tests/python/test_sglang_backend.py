"""ucm.sglang.backend.UcmHiCacheStorage without SGLang (CI): a real store precomputed by `ucm
precompute --sglang-page-size` (SmolLM2-135M-Instruct, two python3.11-doc pages), read through the
backend into host buffers laid out as sglang 0.5.23's MHATokenToKVPoolHost lays out kv_buffer in
each layout (numpy stand-ins of its one tensor), at TP 1 and on each rank of TP 3: every page
equals ucm's own payload of its blocks (Store.load), read by plain numpy indexing here. Misses and
bad calls answer as misses. Pages the backend writes (a page namespace of the TP rank's heads,
store_v1.md §12.2) are read back bit for bit by a later backend, into another pool, in every
layout; the store steps to format 5; `ucm inspect` counts them and `ucm gc` collects them. The
same backend inside SGLang's own factory and host pool:
tests/sglang/test_backend_sglang.py (scripts/test_sglang.sh)."""
import json
import time
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import ucm
import ucm.sglang
from ucm.sglang.backend import UcmHiCacheStorage, head_range

P = 32
DOCS = Path("/usr/share/doc/python3.11/html/_sources")
LAYOUTS = ["page_first", "layer_first", "page_first_direct", "page_head"]


class NpTensor:
    """What the backend reads of a torch tensor: data_ptr(), stride() (elements), element_size()."""

    def __init__(self, a):
        self.a = a

    def data_ptr(self):
        return self.a.ctypes.data

    def stride(self):
        return tuple(s // self.a.itemsize for s in self.a.strides)

    def element_size(self):
        return self.a.itemsize


def pool(ns, layout, heads, pages=24):
    """kv_buffer as sglang 0.5.23 init_kv_buffer shapes it (bf16 held as uint16), filled with 7s."""
    L, D, size = ns.num_layers, ns.head_dim, pages * P
    dims = {"layer_first": (2, L, size, heads, D), "page_first": (2, size, L, heads, D),
            "page_first_direct": (2, pages, L, P, heads, D), "page_head": (2, pages, heads, P, L, D)}[layout]
    buf = np.full(dims, 7, dtype=np.uint16)
    return SimpleNamespace(layout=layout, page_size=P, layer_num=L, head_num=heads, head_dim=D, dtype=None,
                           kv_buffer=NpTensor(buf)), buf


def host_page(buf, layout, first):
    """The page at host slot `first` as [2][L][P][H][D]."""
    if layout == "layer_first":
        return buf[:, :, first:first + P]
    if layout == "page_first":
        return buf[:, first:first + P].transpose(0, 2, 1, 3, 4)
    if layout == "page_first_direct":
        return buf[:, first // P]
    return buf[:, first // P].transpose(0, 3, 2, 1, 4)


@pytest.fixture(scope="module")
def store(ucm_bin, model_dir, tmp_path_factory):
    if not DOCS.is_dir():
        pytest.skip(f"no corpus at {DOCS}")
    _MODEL["dir"] = str(model_dir)
    s = tmp_path_factory.mktemp("sgl") / "store"
    out = subprocess.run([ucm_bin, "precompute", "--model", str(model_dir), "--corpus", str(DOCS), "--corpus-suffix",
                          ".rst.txt", "--store", str(s), "--template", "configs/template_chat.txt", "--limit", "2",
                          "--compute-dtype", "auto", "--sglang-page-size", str(P), "--json"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    rep = json.loads(out.stdout)
    assert rep["sglang_page_size"] == P and rep["sglang_pages"] > 0
    # The admin command rebuilds the same table.
    again = json.loads(subprocess.run([ucm_bin, "sglang-pages", str(s), "--page-size", str(P), "--json"],
                                      capture_output=True, text=True, check=True).stdout)
    assert again["pages"] == rep["sglang_pages"] and again["documents_used"] == 2
    docs = json.loads(subprocess.run([ucm_bin, "inspect", str(s), "--docs", "--json"], capture_output=True, text=True,
                                     check=True).stdout)["docs"]
    with ucm.Store(str(s)) as st:
        ns = st.namespace(next(d["id"] for d in st.namespaces()
                                 if d.get("hash_scheme", "md5-chain-v1") == "md5-chain-v1"))
        ids = st.tokens(ns, bytes.fromhex(max(docs, key=lambda d: d["tokens"])["last_block"]))
    return str(s), ns, [int(t) for t in ids]


_MODEL = {}  # the model directory of the store fixture: SGLang's model_name (its --model-path)


def backend(path, rank=0, size=1, **extra):
    return UcmHiCacheStorage(SimpleNamespace(extra_config={"store": path, **extra}, is_mla_model=False, tp_rank=rank,
                                             tp_size=size, model_name=_MODEL["dir"]), {})


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("tp", [(0, 1), (0, 3), (2, 3)])
def test_pages_land_in_each_host_layout_as_ucms_payload(store, layout, tp):
    path, ns, ids = store
    heads = head_range(tp[0], tp[1], ns.num_kv_heads)
    be = backend(path, *tp)
    hp, buf = pool(ns, layout, heads[1] - heads[0])
    be.register_mem_pool_host(hp)
    keys = ucm.sglang.page_hashes(ids, P)
    assert len(keys) >= 16 and be.batch_exists(keys) == len(keys)
    keys = keys[:16]
    n = len(keys)
    first = np.random.default_rng(tp[0]).permutation(24)[:n] * P  # scattered pages of the pool
    idx = (first[:, None] + np.arange(P)[None, :]).reshape(-1)
    assert be.batch_get_v1(keys, idx) == [True] * n
    k = P // ns.block_size
    hashes = ucm.hash_blocks(ns.hash_seed, ids, ns.block_size)
    with ucm.Store(path) as s:
        for i in range(n):
            want = np.zeros((k, ns.num_layers, 2, ns.block_size, heads[1] - heads[0], ns.head_dim), dtype=np.uint16)
            assert (s.load(ns, hashes[i * k:(i + 1) * k], want, heads=heads) == 0).all()
            want = want.transpose(2, 1, 0, 3, 4, 5).reshape(2, ns.num_layers, P, heads[1] - heads[0], ns.head_dim)
            assert np.array_equal(host_page(buf, layout, int(first[i])), want), f"page {i}"
    spare = next(p * P for p in range(24) if p * P not in set(first.tolist()))
    assert (host_page(buf, layout, spare) == 7).all()  # a page not read stays as it was
    be.close()


def test_misses_and_bad_calls_answer_as_misses(store):
    path, ns, ids = store
    be = backend(path)
    hp, _ = pool(ns, "page_first", ns.num_kv_heads)
    be.register_mem_pool_host(hp)
    keys = ucm.sglang.page_hashes(ids, P)[:2]
    other = ucm.sglang.page_hashes(list(range(1000, 1000 + 2 * P)), P)
    assert be.batch_exists(keys + other) == 2 and be.batch_exists(other + keys) == 0
    idx = np.arange(4 * P)
    assert be.batch_get_v1(other + keys, idx) == [False, False, True, True]
    assert be.batch_get_v1(keys, idx[:P]) == [False, False]          # indices for one page
    assert be.batch_get_v1(["xyz", keys[0]], idx[:2 * P]) == [False, False]
    assert be.batch_exists(["xyz"]) == 0
    assert be.batch_set_v1(keys, idx[:P]) == [False, False]            # indices for one page
    assert be.counters()["errors"] >= 3
    be.close()


def test_a_pool_that_does_not_fit_makes_every_call_a_miss(store, caplog):
    path, ns, ids = store
    be = backend(path)
    hp, _ = pool(ns, "page_first", ns.num_kv_heads)
    hp.head_dim = ns.head_dim * 2
    with caplog.at_level("ERROR", logger="ucm.sglang"):
        be.register_mem_pool_host(hp)
    assert "head_dim" in caplog.text
    keys = ucm.sglang.page_hashes(ids, P)[:2]
    assert be.batch_exists(keys) == 0 and be.batch_get_v1(keys, np.arange(2 * P)) == [False, False]
    be.close()


def test_the_namespace_is_the_models_by_the_one_rule(store, tmp_path, caplog):
    """store_v1.md §7.3: the pool's dtype and page size with the model's fingerprint pick the
    namespace; a reader with none that suits misses, naming both fingerprints; a writer on an empty
    store creates the namespace precompute registers (same id, same r4_projection)."""
    path, ns, ids = store
    be = backend(path, write=False)
    hp, _ = pool(ns, "page_first", ns.num_kv_heads)
    hp.dtype = "torch.float16"
    with caplog.at_level("ERROR", logger="ucm.sglang"):
        be.register_mem_pool_host(hp)
    assert "dtype bf16 (store) vs fp16" in caplog.text and "weights_digest" in caplog.text
    assert be.batch_exists(ucm.sglang.page_hashes(ids, P)[:1]) == 0
    be.close()
    fresh = backend(str(tmp_path / "fresh"))
    hp, _ = pool(ns, "page_first", ns.num_kv_heads)
    fresh.register_mem_pool_host(hp)
    assert fresh.ns.id == ns.id
    with ucm.Store(path) as s:
        assert fresh.store.attachment(fresh.ns, "r4_projection") == s.attachment(ns, "r4_projection")
    fresh.close()
    with pytest.raises(ValueError, match="model_dir"):
        UcmHiCacheStorage(SimpleNamespace(extra_config={"store": path}, is_mla_model=False, tp_rank=0, tp_size=1,
                                          model_name="no-such/model"), {})


def test_refusals_at_construction(store):
    path, ns, _ = store
    with pytest.raises(ValueError, match="MLA"):
        UcmHiCacheStorage(SimpleNamespace(extra_config={"store": path}, is_mla_model=True), {})
    with pytest.raises(ValueError, match="does not divide"):
        backend(path, 0, 2)       # 3 KV heads over TP 2
    assert head_range(5, 6, 3) == (2, 3)  # TP 6 over 3 heads: each head on two ranks
    be = backend(path)
    be.register_mem_host_pool_v2(object(), "kv")
    be.on_host_pools_registered()                             # KV only: attached
    be.register_mem_host_pool_v2(object(), "mamba")
    with pytest.raises(ValueError, match="hybrid"):
        be.on_host_pools_registered()
    be.close()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("tp", [(0, 1), (1, 3)])
def test_pages_sglang_writes_are_read_back_by_a_later_server(store, layout, tp):
    path, ns, _ = store
    heads = head_range(tp[0], tp[1], ns.num_kv_heads)
    nh = heads[1] - heads[0]
    salt = LAYOUTS.index(layout) * 10 + tp[1]
    keys = ucm.sglang.page_hashes([(7 * j + salt) % 49000 for j in range(4 * P)], P)  # pages no table lists
    be = backend(path, *tp)
    hp, buf = pool(ns, layout, nh)
    be.register_mem_pool_host(hp)
    buf[...] = np.random.default_rng(salt).integers(0, 1 << 16, size=buf.shape, dtype=np.uint16)
    first = np.random.default_rng(salt + 1).permutation(24)[:4] * P
    idx = (first[:, None] + np.arange(P)[None, :]).reshape(-1)
    assert be.batch_exists(keys) == 0
    assert be.batch_set_v1(keys, idx) == [True] * 4
    assert be.batch_exists(keys) == 4
    original = buf.copy()
    buf ^= 0x5555                                            # other bytes at the same slots
    assert be.batch_set_v1(keys, idx) == [True] * 4          # already stored: nothing written again
    assert be.counters()["set_written"] == 4
    io = be.get_stats()  # outside SGLang: StorageMetrics' lists as a dict, since the last call
    assert io["backup_pgs"] == [4, 0] and io["prefetch_pgs"] == []
    assert io["backup_bandwidth"][0] > 0 and io["backup_bandwidth"][1] == 0
    assert be.get_stats()["backup_pgs"] == []
    buf[...] = original
    be.close()
    with open(Path(path) / "UCMSTORE", "rb") as f:
        assert int.from_bytes(f.read(12)[8:12], "little") == 5  # superblock format_version (§2, §12.2)
    # A later server with the same head range reads them into another pool, elsewhere, laid out
    # another way (so a layout error on the way in cannot cancel one on the way out).
    layout2 = LAYOUTS[(LAYOUTS.index(layout) + 1) % len(LAYOUTS)]
    be2 = backend(path, *tp)
    hp2, buf2 = pool(ns, layout2, nh)
    be2.register_mem_pool_host(hp2)
    first2 = np.random.default_rng(salt + 2).permutation(24)[:4] * P
    idx2 = (first2[:, None] + np.arange(P)[None, :]).reshape(-1)
    assert be2.batch_get_v1(keys, idx2) == [True] * 4
    for a, b in zip(first, first2):
        assert np.array_equal(host_page(buf2, layout2, int(b)), host_page(buf, layout, int(a)))
    io = be2.get_stats()
    assert io["prefetch_pgs"] == [4] and io["prefetch_bandwidth"][0] > 0
    be2.close()
    # Pages written at TP 1 hold all heads: a rank of TP 3 reads its head of them. Pages a TP 3
    # rank wrote hold its head only: not a TP 1 server's.
    other = (0, 1) if tp == (1, 3) else (2, 3)
    be3 = backend(path, *other)
    hp3, buf3 = pool(ns, layout, 1 if other[1] == 3 else ns.num_kv_heads)
    be3.register_mem_pool_host(hp3)
    if tp == (0, 1):
        assert be3.batch_exists(keys) == 4
        assert be3.batch_get_v1(keys, idx2) == [True] * 4
        for a, b in zip(first, first2):
            assert np.array_equal(host_page(buf3, layout, int(b)), host_page(buf, layout, int(a))[:, :, :, 2:3])
    else:
        assert be3.batch_exists(keys) == 0
    be3.close()


def test_written_pages_are_counted_by_inspect_and_collected_by_gc(store, ucm_bin, tmp_path):
    import shutil
    path, ns, _ = store
    copy = tmp_path / "store"
    shutil.copytree(path, copy)

    def full_range_pages():
        ins = json.loads(subprocess.run([ucm_bin, "inspect", str(copy), "--json"], capture_output=True, text=True,
                                        check=True).stdout)
        want = {"of": ns.id.hex(), "head_begin": 0, "head_end": ns.num_kv_heads}
        pages = [n for n in ins["namespaces"] if n.get("sglang_pages") == want]
        assert len(pages) <= 1 and all(n["block_size"] == P for n in pages)
        return ins, (pages[0]["blocks"] if pages else 0)

    _, before = full_range_pages()
    be = backend(str(copy))
    hp, buf = pool(ns, "page_first", ns.num_kv_heads)
    be.register_mem_pool_host(hp)
    keys = ucm.sglang.page_hashes([(11 * j + 5) % 49000 for j in range(3 * P)], P)
    assert be.batch_set_v1(keys, np.arange(3 * P)) == [True] * 3
    be.close()
    ins, after = full_range_pages()
    assert ins["format_version"] == 5
    assert after == before + 3                                   # counted by inspect, named as SGLang pages
    v = subprocess.run([ucm_bin, "gc", str(copy), "--verify", "--json"], capture_output=True, text=True)
    assert v.returncode == 0, v.stderr
    assert json.loads(v.stdout)["orphans_removed"] == 0          # they chain from their namespace's root
    g = subprocess.run([ucm_bin, "gc", str(copy), "--max-bytes", "0", "--json"], capture_output=True, text=True)
    assert g.returncode == 0, g.stderr
    be = backend(str(copy))
    be.register_mem_pool_host(pool(ns, "page_first", ns.num_kv_heads)[0])
    assert be.batch_exists(keys) == 0
    be.close()


def test_pages_written_after_precomputed_pages_survive_gc(store, ucm_bin, tmp_path):
    """SGLang writes the pages after a precomputed prefix (served through the page table, another
    namespace): their parent would be outside their page namespace, an orphan to gc. They start a
    chain instead (store_v1.md §12.2), in one call or with the prefix in extra_info.prefix_keys."""
    import shutil
    path, ns, ids = store
    copy = tmp_path / "store"
    shutil.copytree(path, copy)
    new = [(13 * j + 7) % 49000 for j in range(2 * P)]
    keys = ucm.sglang.page_hashes(ids[:2 * P] + new, P)          # 2 precomputed pages, then 2 new ones
    be = backend(str(copy))
    hp, buf = pool(ns, "page_first", ns.num_kv_heads)
    be.register_mem_pool_host(hp)
    assert be.batch_exists(keys) == 2
    buf[...] = np.random.default_rng(3).integers(0, 1 << 16, size=buf.shape, dtype=np.uint16)
    assert be.batch_set_v1(keys[:3], np.arange(3 * P)) == [True] * 3          # page 2 after page 1 (precomputed)
    extra = SimpleNamespace(prefix_keys=keys[:2])                              # page 3 after page 2 (written)
    assert be.batch_set_v1(keys[3:], np.arange(3 * P, 4 * P), extra) == [True]
    keys2 = ucm.sglang.page_hashes(ids[:P] + new[:P], P)                      # a page after precomputed page 0,
    assert be.batch_set_v1(keys2[1:], np.arange(4 * P, 5 * P), SimpleNamespace(prefix_keys=keys2[:1])) == [True]
    written = [host_page(buf, "page_first", f).copy() for f in (2 * P, 3 * P, 4 * P)]
    be.close()
    v = subprocess.run([ucm_bin, "gc", str(copy), "--verify", "--json"], capture_output=True, text=True)
    assert v.returncode == 0, v.stderr
    assert json.loads(v.stdout)["orphans_removed"] == 0
    be = backend(str(copy))
    hp2, buf2 = pool(ns, "page_first", ns.num_kv_heads)
    be.register_mem_pool_host(hp2)
    assert be.batch_exists(keys) == 4 and be.batch_exists(keys2) == 2
    assert be.batch_get_v1([keys[2], keys[3], keys2[1]], np.arange(3 * P)) == [True] * 3
    for i, w in enumerate(written):
        assert np.array_equal(host_page(buf2, "page_first", i * P), w)
    be.close()


def test_blocks_a_vllm_server_saved_are_served_to_sglang(store, ucm_bin, tmp_path):
    """A chain saved with its token ids (the vLLM connector's save path: Store.dump with tokens)
    and no document: `ucm sglang-pages` lists its pages too, and the SGLang backend reads them."""
    import shutil
    path, ns0, _ = store
    copy = tmp_path / "store"
    shutil.copytree(path, copy)
    T = ns0.block_size
    ids = [(29 * j + 3) % 49000 for j in range(3 * P)]            # three pages nobody registered
    with ucm.Store(str(copy), mode="w") as s:
        ns = s.namespace(ns0.id)
        hs = ucm.hash_blocks(ns.hash_seed, ids, T)
        payload = np.random.default_rng(5).integers(0, 1 << 16, size=(len(hs),) + tuple(ns.payload_shape()),
                                                   dtype=np.uint16)
        assert (np.asarray(s.dump(ns, hs, ucm.parents_of(ns.hash_seed, hs), payload, tokens=ids)) == 0).all()
    be = backend(str(copy), write=False)                          # a reading server that runs already
    hp, buf = pool(ns0, "page_first", ns0.num_kv_heads, pages=3)
    be.register_mem_pool_host(hp)
    keys = ucm.sglang.page_hashes(ids, P)
    assert be.batch_exists(keys) == 0
    out = subprocess.run([ucm_bin, "sglang-pages", str(copy), "--page-size", str(P), "--namespace", ns0.id.hex(),
                          "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    rep = json.loads(out.stdout)
    assert rep["chains_used"] == 1 and rep["documents_used"] == 2
    deadline = time.time() + 30          # libucm reads a rebuilt table again within 5 s (store_v1.md §12.1)
    while be.batch_exists(keys) < 3 and time.time() < deadline:
        time.sleep(0.5)
    assert be.batch_exists(keys) == 3
    assert be.batch_get_v1(keys, np.arange(3 * P)) == [True] * 3
    k = P // T
    for i in range(3):  # page i = blocks k*i .. k*i+k-1, [L][2][T][H][D] each, as [2][L][P][H][D]
        want = np.concatenate([payload[k * i + j].transpose(1, 0, 2, 3, 4) for j in range(k)], axis=2)
        assert np.array_equal(host_page(buf, "page_first", i * P), want)
    be.close()
