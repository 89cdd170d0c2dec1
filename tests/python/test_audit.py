"""`ucm inspect --audit` on a real store (issue 38, point 3): what checksums cannot see.

A precomputed store of two python3.11-doc pages (SmolLM2-135M-Instruct, fp32 payloads, block 16):
  * the audit of every block finds none poisoned, and reports its largest honest deviation;
  * a second writer saves one document's chain with the KV of another document (valid checksums,
    the right token ids and hashes: what a server that saves KV it never computed leaves):
    `ucm inspect --verify` calls the store clean, the audit exits 3 naming every such block with
    its chain position and first bad layer, and the smallest poisoned deviation is far above the
    tolerance and the honest ones far below;
  * --fix removes them with every block chained after them and the document that loses them;
    a second audit is clean, and `ucm precompute --resume` recomputes that document.
"""
import json
import shutil

import numpy as np
import pytest

import ucm
from doc_corpus import run, write_corpus

DOCS = ["c-api/apiabiversion.rst.txt", "library/sched.rst.txt"]  # two pages: the suite's time is counted
# fp32 compute for the writer too: a bf16-computing writer is honest but drifts by ~5% (its own
# margin is measured on real stores, docs/reliability.md); here the margins are exact.
FP32 = ["--compute-dtype", "fp32", "--threads", "1"]


@pytest.fixture(scope="module")
def store(tmp_path_factory, ucm_bin, model_dir):
    d, corpus = write_corpus(tmp_path_factory, "audit", DOCS, limit=1200)
    path = d / "store"
    out = run([ucm_bin, "precompute", *FP32, "--model", model_dir, "--corpus", corpus, "--store", path,
               "--dtype", "fp32", "--block-size", "16", "--json"])
    assert json.loads(out.stdout)["documents"] == len(DOCS)
    return path, corpus


def audit(ucm_bin, model_dir, path, *extra, ok=(0,)):
    # The audit recomputes in fp32 (its default): the reference must not drift (bf16 compute does).
    p = run([ucm_bin, "inspect", path, "--audit", "--model", model_dir, "--compute-threads", "1", *extra, "--json"],
            ok=ok)
    return p.returncode, json.loads(p.stdout)


def test_honest_store_passes_and_poisoned_blocks_are_caught_and_fixed(store, ucm_bin, model_dir, tmp_path):
    src, corpus = store
    code, rep = audit(ucm_bin, model_dir, src, "--all")
    assert rep["poisoned_total"] == 0 and rep["audited"] == rep["blocks_in_namespace"] > 0, rep
    assert rep["tokens_unknown"] == 0 and rep["max_honest_deviation"] < rep["tolerance"] / 100, rep

    # A copy of the store, then a second writer that saves document 0's chain (its ids and hashes)
    # with document 1's KV, block for block: valid checksums, wrong KV.
    path = tmp_path / "poisoned"
    shutil.copytree(src, path)
    last = {d["id"]: bytes.fromhex(d["last_block"])
            for d in json.loads(run([ucm_bin, "inspect", path, "--docs", "--json"]).stdout)["docs"]}
    with ucm.Store(str(path), mode="w") as w:
        (ns_desc,) = w.namespaces()
        ns = w.namespace(ns_desc["id"])
        ids0 = w.tokens(ns, last[DOCS[0]])
        ids1 = w.tokens(ns, last[DOCS[1]])
        T = ns.block_size
        n = min(len(ids0), len(ids1)) // T
        # The new chain: document 0's ids with its first token changed, so every block of it is new
        # to the store.
        ids = np.array(ids0[: n * T], dtype=np.uint32)
        ids[0] = (int(ids[0]) + 1) % 49152
        hs = ucm.hash_blocks(ns.hash_seed, ids, T)
        kv1 = np.zeros((n, ns.block_bytes()), dtype=np.uint8)
        hs1 = ucm.hash_blocks(ns.hash_seed, ids1, T)[:n]
        assert (w.load(ns, hs1, kv1) == 0).all()
        st = w.dump(ns, hs, ucm.parents_of(ns.hash_seed, hs), kv1, tokens=ids)
        assert (st == 0).all()
    verify = json.loads(run([ucm_bin, "inspect", path, "--verify", "--json"]).stdout)
    assert verify["corrupt_total"] == 0, "checksums cannot see wrong KV"

    code, rep = audit(ucm_bin, model_dir, path, "--all", ok=(3,))
    assert code == 3 and rep["poisoned_total"] == n, rep
    assert {p["chain_position"] for p in rep["poisoned"]} == set(range(n))
    assert all(p["first_bad_layer"] == 0 and p["first_bad_kv"] == "K" for p in rep["poisoned"]), rep["poisoned"]
    assert rep["min_poisoned_deviation"] > 2 * rep["tolerance"] > 200 * rep["max_honest_deviation"], rep
    assert rep["honest"] == rep["audited"] - n

    code, fixed = audit(ucm_bin, model_dir, path, "--all", "--fix")
    assert fixed["fixed"] and fixed["fix_blocks_removed"] == n, fixed
    code, again = audit(ucm_bin, model_dir, path, "--all")
    assert again["poisoned_total"] == 0 and again["audited"] == rep["audited"] - n
