#!/usr/bin/env python3
"""batch_exists of the ucm.sglang backend against the vLLM connector's lookup path (issue 39).

    PYTHONPATH=lib/python UCM_LIB=build/lib/libucm.so python3 scripts/bench_sglang_exists.py STORE \
        [--keys 10000] [--page-size 64] [--repeat 20]

STORE: a precomputed store whose SGLang page table for --page-size exists (`ucm sglang-pages`).
The keys are the table's real pages (SGLang's keys of the store's documents, computed by
ucm.sglang.page_hashes, cycled to --keys). Both sides answer "how much of this prefix is stored"
for the same tokens (--keys x page-size of them):
  * sglang: UcmHiCacheStorage.batch_exists(keys): hex keys -> table -> block lookups;
  * vllm:   what UcmConnector.get_num_new_matched_tokens does: ucm.hash_blocks over the token ids,
            then Store.lookup of the block hashes.
Prints the median time per key (page) of each and their ratio; --json for one JSON object.
SGLang itself is not needed (the backend is built with stand-in config and pool objects)."""
import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib/python"))
import numpy as np  # noqa: E402

import ucm  # noqa: E402
import ucm.sglang  # noqa: E402
from ucm.sglang.backend import UcmHiCacheStorage  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("store")
    ap.add_argument("--keys", type=int, default=10000)
    ap.add_argument("--page-size", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--ucm", default=str(ROOT / "build/bin/ucm"))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--model", default=str(ROOT / "models/SmolLM2-135M-Instruct"),
                    help="the model directory whose fingerprint picks the namespace (the backend's model_dir)")
    a = ap.parse_args()
    P = a.page_size
    docs = json.loads(subprocess.run([a.ucm, "inspect", a.store, "--docs", "--json"], capture_output=True, text=True,
                                     check=True).stdout)["docs"]
    with ucm.Store(a.store) as s:
        ns = s.namespace(docs[0]["namespace_id"])  # the documents' namespace (not a page namespace)
        seqs = [s.tokens(ns, bytes.fromhex(d["last_block"])) for d in docs if d["namespace_id"] == docs[0]["namespace_id"]]
    keys, ids = [], []
    while len(keys) < a.keys:                     # real pages, cycled; each key with its 64 tokens
        for t in seqs:
            full = len(t) // P * P
            ks = ucm.sglang.page_hashes(t[:full], P)
            keys += ks
            ids.append(np.asarray(t[:full], dtype=np.int64))
    keys = keys[:a.keys]
    tokens = np.concatenate(ids)[:a.keys * P]
    cfg = SimpleNamespace(extra_config={"store": a.store, "model_dir": a.model}, is_mla_model=False, tp_rank=0,
                          tp_size=1, model_name=None)
    be = UcmHiCacheStorage(cfg, {})
    be.register_mem_pool_host(SimpleNamespace(layout="page_first", page_size=P, layer_num=ns.num_layers,
                                              head_num=ns.num_kv_heads, head_dim=ns.head_dim, dtype=None))
    store = be.store

    def sglang():
        return be.batch_exists(keys)

    def vllm():
        hashes = ucm.hash_blocks(ns.hash_seed, tokens, ns.block_size)
        return store.lookup(ns, hashes).prefix_blocks

    res = {}
    for name, f in (("sglang_batch_exists", sglang), ("vllm_connector_lookup", vllm)):
        f()
        ts = []
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t0)
        res[name] = {"median_s": statistics.median(ts), "us_per_key": statistics.median(ts) / a.keys * 1e6}
    res["keys"] = a.keys
    res["page_size"] = P
    res["tokens"] = int(tokens.size)
    res["ratio_sglang_to_vllm"] = res["sglang_batch_exists"]["median_s"] / res["vllm_connector_lookup"]["median_s"]
    res["table_pages"] = be.table.pages_at_open
    be.close()
    if a.json:
        print(json.dumps(res, indent=1))
    else:
        print(f"{a.keys} keys of {P} tokens ({res['table_pages']} distinct pages in the table, cycled):")
        for k in ("sglang_batch_exists", "vllm_connector_lookup"):
            print(f"  {k:24s} {res[k]['median_s'] * 1e3:8.2f} ms  {res[k]['us_per_key']:6.2f} us/key")
        print(f"  ratio sglang / vllm      {res['ratio_sglang_to_vllm']:.2f} (target <= 2)")


if __name__ == "__main__":
    main()
