"""ucm.Store through the package, the way a Python inference server uses libucm.

Creates a store, registers a namespace, hashes token ids (checked against hashlib, store_v1.md
§4.1), dumps blocks, opens a second (read-only) handle, looks up, loads into numpy arrays with a
KV-head range (contiguous and paged) and checks the bytes against the payload layout of
store_v1.md §4.2, reads the metrics, and checks that errors raise the right ucm.Error subclass.
"""
import hashlib
import json
import os
import struct
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest

import ucm

L, T, H, D, S = 2, 16, 4, 8, 2  # layers, block tokens, KV heads, head dim, bf16 bytes
PAYLOAD = L * 2 * T * H * D * S
DESC = {"model_id": "py-model", "weights_digest": "cafe", "dtype": "bf16", "block_size": T, "num_layers": L,
        "num_kv_heads": H, "head_dim": D, "name": "py"}


def payload(i):
    return np.frombuffer(bytes((i * 37 + j * 7 + 1) & 0xFF for j in range(PAYLOAD)), dtype=np.uint8)


def heads_slice(p, h0, h1):
    """Expected bytes of heads [h0, h1) of one block, [L][2][T][h1-h0][D] (spec §4.2), by hand."""
    b = p.tobytes()
    out = bytearray()
    for l in range(L):
        for kv in range(2):
            for t in range(T):
                off = (((l * 2 + kv) * T + t) * H + h0) * D * S
                out += b[off: off + (h1 - h0) * D * S]
    return bytes(out)


def fill_store(tmp_path, payload_of):
    """A store under tmp_path with 3 blocks of namespace "py", block i's payload payload_of(i);
    returns (path, ns, tokens, hashes)."""
    path = str(tmp_path / "store")
    tokens = list(range(1000, 1000 + 3 * T + 5))
    with ucm.Store(path, mode="c") as w:
        ns = w.register_namespace(DESC)
        hashes = ucm.hash_blocks(ns.hash_seed, tokens, T)
        st = w.dump(ns, hashes, ucm.parents_of(ns.hash_seed, hashes), [payload_of(i) for i in range(3)])
        assert list(st) == [0, 0, 0]
    return path, ns, tokens, hashes


@pytest.fixture()
def filled(tmp_path):
    """A store with 3 blocks of namespace "py"; yields (path, ns, tokens, hashes)."""
    return fill_store(tmp_path, payload)


def test_version_and_codes():
    assert ucm.version() == ucm.__version__
    assert ucm.format_version() == 5  # single stores (store_v1.md §10); sharded roots are 3
    assert ucm.code_name(2) == "UCM_E_CORRUPTION"
    assert "checksum" in ucm.strerror(2)
    assert os.path.exists(ucm.library_path())


def test_event_medium_names_the_store_directory(tmp_path, monkeypatch):
    """The KV events' medium (ucm/kv_event_blocks.h, docs/cli.md "ucm events"): "ucm:" + the directory's name."""
    assert ucm.event_medium("/srv/kv/corpus") == "ucm:corpus"
    assert ucm.event_medium("/srv/kv/corpus/") == "ucm:corpus"
    assert ucm.event_medium("/srv/kv/./corpus/../shared") == "ucm:shared"
    monkeypatch.chdir(tmp_path)
    assert ucm.event_medium(".") == "ucm:" + tmp_path.name
    assert ucm.event_medium("rel/store") == "ucm:store"


def test_hash_chain_matches_the_spec(tmp_path):
    ns = ucm.namespace_id(DESC)
    tokens = list(range(1000, 1000 + 3 * T + 5))
    hs = ucm.hash_blocks(ns, tokens, T)
    assert hs.shape == (3, 16) and hs.dtype == np.uint8
    h = hashlib.md5(b"ucm.hash.v1" + ns).digest()
    assert ucm.hash_root(ns) == h
    for b in range(3):
        h = hashlib.md5(h + struct.pack(f"<{T}I", *tokens[b * T:(b + 1) * T])).digest()
        assert hs[b].tobytes() == h, f"block {b} differs from hashlib"
    # A continuation from block 0 gives blocks 1.. of the whole chain.
    assert np.array_equal(ucm.hash_blocks(ns, tokens[T:], T, parent=hs[0].tobytes()), hs[1:])
    assert ucm.hash_blocks(ns, tokens[:T - 1], T).shape == (0, 16)
    with pytest.raises(ucm.Invalid):
        ucm.hash_blocks(ns, [-1] * T, T)
    with pytest.raises(ucm.Invalid):
        ucm.hash_blocks(b"short", tokens, T)


def test_lookup_and_load(filled):
    path, ns_w, tokens, hashes = filled
    with ucm.Store(path) as r:
        ns = r.namespace("py")
        assert ns.id == ns_w.id and ns.hash_seed == ns_w.id  # not a converted namespace
        assert r.namespace(ns.id.hex()).id == ns.id
        listed = r.namespaces()
        assert [(d["id"], d["name"], d["model_id"]) for d in listed] == [(ns.id.hex(), "py", "py-model")]
        assert (ns.block_size, ns.num_layers, ns.num_kv_heads, ns.head_dim, ns.dtype) == (T, L, H, D, "bf16")
        assert np.array_equal(ucm.hash_blocks(ns.hash_seed, tokens, T), hashes)
        hit = r.lookup(ns, hashes)
        assert hit.prefix_blocks == 3 and hit.present.tolist() == [True] * 3
        other = ucm.hash_blocks(ns.hash_seed, [7] * (2 * T), T)
        hit = r.lookup(ns, np.concatenate([hashes[:1], other]))
        assert hit.prefix_blocks == 1 and hit.present.tolist() == [True, False, False]

        # Tensor-parallel rank 1 of 2: heads [2, 4), into one numpy array [n][L][2][T][2][D] (bf16 as uint16).
        out = np.zeros((3,) + ns.payload_shape((2, 4)), dtype=np.uint16)
        st = r.load(ns, hashes, out, heads=(2, 4))
        assert st.tolist() == [0, 0, 0]
        for i in range(3):
            assert out[i].tobytes() == heads_slice(payload(i), 2, 4), f"block {i}: bytes differ"

        # Paged: one page per (block, layer, K/V), heads [0, 1).
        pages = [np.zeros(ns.page_bytes((0, 1)), dtype=np.uint8) for _ in range(3 * L * 2)]
        st = r.load(ns, hashes, pages, heads=(0, 1), paged=True)
        assert st.tolist() == [0, 0, 0]
        for i in range(3):
            got = b"".join(pages[(i * L + l) * 2 + kv].tobytes() for l in range(L) for kv in range(2))
            assert got == heads_slice(payload(i), 0, 1), f"paged block {i}: bytes differ"

        # Paged through raw addresses (a server's KV cache), asynchronously.
        cache = np.zeros((3 * L * 2, T, H, D), dtype=np.uint16)
        addrs = [cache.ctypes.data + k * cache[0].nbytes for k in range(3 * L * 2)]
        with r.load(ns, hashes, addrs, paged=True, wait=False) as task:
            assert task.wait(10).tolist() == [0, 0, 0]
            assert task.done()
        assert cache.tobytes()[:PAYLOAD] == payload(0).tobytes()

        # A miss is a per-block NOT_FOUND; the destination is left alone.
        sentinel = np.full(ns.block_bytes((2, 4)), 0xAB, dtype=np.uint8)
        assert r.load(ns, other[:1], sentinel, heads=(2, 4)).tolist() == [ucm.NotFound.code]
        assert (sentinel == 0xAB).all()

        text = r.metrics()
        for want in ("ucm_lookups_total 6", "# TYPE ucm_load_task_seconds histogram"):
            assert want in text, f"metrics lack {want!r}"
        r.refresh()


def test_torch_tensors_if_available(filled):
    torch = pytest.importorskip("torch")
    path, _, _, hashes = filled
    with ucm.Store(path) as r:
        ns = r.namespace("py")
        out = torch.empty((3,) + ns.payload_shape(), dtype=torch.bfloat16)
        assert r.load(ns, hashes, out).tolist() == [0, 0, 0]
        assert out.view(torch.uint8).numpy().tobytes()[:PAYLOAD] == payload(0).tobytes()


def test_errors_name_the_return_code(tmp_path, filled):
    path, ns, _, hashes = filled
    with pytest.raises(ucm.Invalid) as e:
        ucm.Store(str(tmp_path / "nothing-here"))
    assert e.value.code == 3 and e.value.code_name == "UCM_E_INVALID" and "nothing-here" in str(e.value)
    with ucm.Store(path) as r:
        with pytest.raises(ucm.NotFound):
            r.namespace("no-such-namespace")
        n = r.namespace("py")
        with pytest.raises(ucm.Invalid):  # wrong destination size: refused before any I/O
            r.load(n, hashes, np.zeros(10, dtype=np.uint8))
        with pytest.raises(ucm.Invalid):
            r.load(n, hashes, np.zeros((3, 10)).T)  # not contiguous
        with pytest.raises(ucm.Invalid):
            r.load(n, hashes, np.zeros((3,) + n.payload_shape(), np.uint16), heads=(3, 9))
        with pytest.raises(ucm.NotFound):
            r.document(n, "no-such-doc")
    with ucm.Store(path, mode="w") as w:
        with pytest.raises(ucm.Busy) as e:
            ucm.Store(path, mode="w")
        assert "pid" in str(e.value)
    r = ucm.Store(path)
    r.close()
    r.close()
    with pytest.raises(ucm.Invalid):
        r.lookup(ns, hashes)
    with pytest.raises(ucm.Invalid):
        ucm.Store(path, mode="x")


def test_corrupt_block_is_a_miss_and_bytes_untouched(filled):
    path, ns, _, hashes = filled
    # Flip a payload byte of block 1 in the data file (store_v1.md §3: records in data/*.ucmd).
    data_files = sorted(p for p in Path(path).rglob("*") if p.is_file()
                        and p.stat().st_size > PAYLOAD and "index" not in p.parts)
    blob = payload(1).tobytes()
    for f in data_files:
        b = bytearray(f.read_bytes())
        at = b.find(blob)  # the whole payload: a 64-byte piece also occurs in block 0 (same period)
        if at >= 0:
            b[at + 100] ^= 0xFF
            f.write_bytes(bytes(b))
            break
    else:
        pytest.fail("payload of block 1 not found in the data files")
    with ucm.Store(path) as r:
        out = np.full((3, PAYLOAD), 0x5A, dtype=np.uint8)
        st = r.load(r.namespace("py"), hashes, out)
        assert st.tolist() == [0, ucm.Corruption.code, 0]
        assert (out[1] == 0x5A).all() and out[0].tobytes() == payload(0).tobytes()


def test_log_callback_and_threads(filled):
    path, _, _, hashes = filled
    lines = []
    lock = threading.Lock()

    def cb(level, line):
        with lock:
            lines.append((level, line))

    ucm.set_log_callback(cb, ucm.LOG_DEBUG)
    try:
        with ucm.Store(path) as r:
            ns = r.namespace("py")
            errs = []

            def worker():
                try:
                    for _ in range(20):
                        out = np.zeros((3,) + ns.payload_shape(), np.uint16)
                        assert r.load(ns, hashes, out).tolist() == [0, 0, 0]
                except Exception as e:  # pragma: no cover - reported below
                    errs.append(e)
            ts = [threading.Thread(target=worker) for _ in range(4)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            assert not errs, errs
    finally:
        ucm.set_log_callback(None)
    # RocksDB's info log (at debug) came through the callback.
    assert any(line.startswith("ucm.rocksdb: ") for _, line in lines), lines[:5]


def test_token_ids_are_stored_and_a_chain_comes_back(tmp_path):
    """store_v1.md §3.2: dump(tokens=) keeps each block's ids in its record; Store.tokens walks the
    parents back to the chain root; ids that do not hash to the block are refused, writing nothing."""
    path = str(tmp_path / "store")
    tokens = list(range(7000, 7000 + 3 * T))
    with ucm.Store(path, mode="c") as w:
        ns = w.register_namespace(DESC)
        hs = ucm.hash_blocks(ns.hash_seed, tokens, T)
        parents = ucm.parents_of(ns.hash_seed, hs)
        wrong = list(tokens)
        wrong[T + 3] += 1                                     # block 1's ids are not its hash's
        with pytest.raises(ucm.Invalid, match="item 1"):
            w.dump(ns, hs, parents, [payload(i) for i in range(3)], tokens=wrong)
        assert not w.lookup(ns, hs).present.any(), "a refused dump writes nothing"
        with pytest.raises(ucm.Invalid, match="ids for 3 blocks"):
            w.dump(ns, hs, parents, [payload(i) for i in range(3)], tokens=tokens[:-1])
        assert list(w.dump(ns, hs[:2], parents[:2], [payload(0), payload(1)], tokens=tokens[:2 * T])) == [0, 0]
        # Block 2 without ids: "tokens unknown".
        assert list(w.dump(ns, hs[2:], parents[2:], [payload(2)])) == [0]
    with ucm.Store(path) as r:
        got = r.tokens(ns, hs[1])
        assert got.dtype == np.uint32 and got.tolist() == tokens[:2 * T]
        assert r.tokens(ns, hs[0]).tolist() == tokens[:T]
        with pytest.raises(ucm.NotSupported, match=hs[2].tobytes().hex()):
            r.tokens(ns, hs[2])
        with pytest.raises(ucm.NotFound):
            r.tokens(ns, b"\x01" * 16)
    # The bytes, where the spec puts them: flag bit 1 at offset 12, the ids (u32 LE) at offset 128.
    data = sorted(Path(path, "data").glob("*.ucmd"))
    blob = b"".join(p.read_bytes() for p in data)
    for b in range(2):
        want = struct.pack(f"<{T}I", *tokens[b * T:(b + 1) * T])
        at = blob.find(hs[b].tobytes())              # the record header's key (offset 32)
        assert at >= 0
        head = blob[at - 32: at - 32 + 4096]
        assert head[:4] == b"UCMR" and struct.unpack_from("<I", head, 12)[0] & 2
        assert head[128: 128 + 4 * T] == want


def test_a_server_registers_its_documents_as_precompute_does(tmp_path, ucm_bin):
    """Store.put_document (ucm_store_document_put): once a document's blocks are stored, its entry
    is what `ucm precompute` records (first and last block, blocks, tokens, source), `ucm inspect
    --docs` lists it; refused before its last block is stored, for fewer ids than a block, and on a
    read-only handle."""
    path = str(tmp_path / "store")
    ids = list(range(9000, 9000 + 2 * T + 5))              # two full blocks and a tail
    with ucm.Store(path, mode="c") as w:
        ns = w.register_namespace(DESC)
        hs = ucm.hash_blocks(ns.hash_seed, ids, T)
        with pytest.raises(ucm.NotFound, match=hs[-1].tobytes().hex()):
            w.put_document(ns, "doc-a", ids, source="corpus.jsonl:1")
        assert list(w.dump(ns, hs, ucm.parents_of(ns.hash_seed, hs), [payload(0), payload(1)],
                           tokens=ids[:2 * T])) == [0, 0]
        w.put_document(ns, "doc-a", ids, source="corpus.jsonl:1", input="token_ids")
        with pytest.raises(ucm.Invalid, match="less than one block"):
            w.put_document(ns, "short", ids[:T - 1])
        d = w.document(ns, "doc-a")
        assert (d.source, d.blocks, d.tokens) == ("corpus.jsonl:1", 2, len(ids))
    with ucm.Store(path) as r:
        with pytest.raises(ucm.Invalid, match="read-only"):
            r.put_document(ns, "doc-b", ids)
    docs = json.loads(subprocess.run([ucm_bin, "inspect", path, "--docs", "--json"], capture_output=True, text=True,
                                     check=True).stdout)["docs"]
    (doc,) = docs
    assert doc["id"] == "doc-a" and doc["last_block"] == hs[-1].tobytes().hex() and doc["tokens"] == len(ids)
