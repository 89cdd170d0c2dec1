#!/usr/bin/env python3
"""Compare the blocks two precompute runs of the same documents wrote into two stores.

Used by scripts/device_check.sh (GPU precompute against CPU precompute, docs/device.md); works on
any two stores. Needs numpy and the ucm Python package (lib/python, found from this checkout; set
UCM_LIB to the libucm.so to use).

For every document of --ids (JSONL of {id, token_ids}: `ucm tokenize` with the precompute's model,
corpus and template), in both stores:
  * the namespace: the same id (model fingerprint, dtype, block size: so the same hash seed);
  * the document registry: the same block and token counts;
  * block hashes: the chained hashes of its token ids (ucm.hash_blocks, cut at the registered
    block count) are all present in both stores (so both stores hold the same hash set for it);
  * K/V: every block loaded from both, compared element by element. An element matches when it is
    within --max-ulps units in the last place of its dtype (bf16: 8 significant bits), or, for
    elements near zero, within --max-ulps ulps of the RMS of its (layer, K or V) slice.
Prints a report (JSON with --json) and exits 0 when everything matches, 1 otherwise, 2 on errors.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "lib" / "python"))
import ucm  # noqa: E402

MANTISSA_BITS = {"bf16": 7, "fp16": 10, "fp32": 23}


def to_f32(raw: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bf16":
        return (raw.astype(np.uint32) << np.uint32(16)).view(np.float32)
    if dtype == "fp16":
        return raw.view(np.float16).astype(np.float32)
    return raw.view(np.float32)


def ulp_of(x: np.ndarray, mbits: int) -> np.ndarray:
    """One unit in the last place of |x| in a format with mbits explicit mantissa bits."""
    _, e = np.frexp(np.maximum(np.abs(x), np.float32(1e-30)))  # |x| = m * 2^e, m in [0.5, 1)
    return np.ldexp(np.float32(1.0), (e - 1 - mbits).astype(np.int32))


def only_namespace(store: "ucm.Store", want: str | None) -> "ucm.Namespace":
    nss = store.namespaces()
    if want:
        return store.namespace(want)
    if len(nss) != 1:
        raise SystemExit(f"compare_stores: {store.path} has {len(nss)} namespaces; name one with --namespace")
    return store.namespace(nss[0]["id"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="first store (e.g. the CPU run's)")
    ap.add_argument("--b", required=True, help="second store (e.g. the GPU run's)")
    ap.add_argument("--ids", required=True, help="JSONL of {id, token_ids} (ucm tokenize)")
    ap.add_argument("--namespace", help="namespace name or id (default: each store's only one)")
    ap.add_argument("--max-ulps", type=float, default=1.0, help="tolerance in ulps of the payload dtype (default 1)")
    ap.add_argument("--json", help="write the report here as JSON too")
    args = ap.parse_args()

    report = {"a": args.a, "b": args.b, "documents": [], "ok": False}
    problems: list[str] = []
    with ucm.Store(args.a, "r") as sa, ucm.Store(args.b, "r") as sb:
        na, nb = only_namespace(sa, args.namespace), only_namespace(sb, args.namespace)
        report["namespace_a"], report["namespace_b"] = na.name, nb.name
        if na.id != nb.id:
            problems.append(f"namespace ids differ: {na.id.hex()} ({na.name}) vs {nb.id.hex()} ({nb.name})")
        dtype, T = na.dtype, na.block_size
        mbits = MANTISSA_BITS[dtype]
        report.update(dtype=dtype, block_size=T, num_layers=na.num_layers, num_kv_heads=na.num_kv_heads,
                      head_dim=na.head_dim, max_ulps=args.max_ulps)
        raw_dtype = {"bf16": np.uint16, "fp16": np.uint16, "fp32": np.uint32}[dtype]
        seen: set[bytes] = set()
        tot = {"blocks": 0, "elements": 0, "equal": 0, "over": 0, "max_ulps": 0.0, "max_abs": 0.0,
               "max_rel_rms": 0.0}
        for line in open(args.ids, encoding="utf-8"):
            if not line.strip():
                continue
            e = json.loads(line)
            doc_id, ids = str(e["id"]), e["token_ids"]
            d = {"id": doc_id}
            try:
                da, db = sa.document(na, doc_id), sb.document(nb, doc_id)
            except ucm.NotFound as ex:
                problems.append(f"{doc_id}: not registered in both stores ({ex})")
                continue
            d.update(blocks_a=da.blocks, blocks_b=db.blocks, tokens_a=da.tokens, tokens_b=db.tokens)
            if (da.blocks, da.tokens) != (db.blocks, db.tokens):
                problems.append(f"{doc_id}: registry differs: {da.blocks} blocks / {da.tokens} tokens vs "
                                f"{db.blocks} / {db.tokens}")
            n = min(da.blocks, db.blocks)
            hashes = ucm.hash_blocks(na.hash_seed, ids, T)[:n]
            if len(hashes) < n:
                problems.append(f"{doc_id}: {len(hashes)} full blocks in the ids, {n} registered")
                n = len(hashes)
            pa, pb = sa.lookup(na, hashes).present, sb.lookup(nb, hashes).present
            d["present_a"], d["present_b"] = int(pa.sum()), int(pb.sum())
            if not (pa.all() and pb.all()):
                problems.append(f"{doc_id}: blocks missing: {int((~pa).sum())} in a, {int((~pb).sum())} in b")
            # Blocks shared with an earlier document (the template's prefix) are compared once.
            fresh = [i for i in range(n) if pa[i] and pb[i] and hashes[i].tobytes() not in seen]
            seen.update(hashes[i].tobytes() for i in fresh)
            if fresh:
                hs = hashes[fresh]
                shape = (len(fresh),) + na.payload_shape()  # [n][L][2][T][H][D]
                ka, kb = np.empty(shape, raw_dtype), np.empty(shape, raw_dtype)
                st_a, st_b = sa.load(na, hs, ka), sb.load(nb, hs, kb)
                if np.any(st_a != 0) or np.any(st_b != 0):
                    problems.append(f"{doc_id}: load statuses a={np.unique(st_a).tolist()} b={np.unique(st_b).tolist()}")
                fa, fb = to_f32(ka, dtype), to_f32(kb, dtype)
                diff = np.abs(fa - fb)
                ulps = diff / ulp_of(np.maximum(np.abs(fa), np.abs(fb)), mbits)
                # Near zero a relative ulp is meaningless: the floor is an ulp of the RMS of the
                # (layer, K/V) slice over this document's blocks.
                rms = np.sqrt(np.mean(np.square(fa.astype(np.float64)), axis=(0, 3, 4, 5), keepdims=True)).astype(np.float32)
                floor = ulp_of(np.broadcast_to(rms, fa.shape), mbits)
                over = (ulps > args.max_ulps) & (diff > args.max_ulps * floor)
                d.update(compared_blocks=len(fresh), equal_fraction=float(np.mean(ka == kb)),
                         max_ulps=float(ulps.max()), max_abs=float(diff.max()),
                         max_rel_rms=float((diff / np.maximum(rms, 1e-30)).max()), over=int(over.sum()))
                tot["blocks"] += len(fresh)
                tot["elements"] += int(ka.size)
                tot["equal"] += int((ka == kb).sum())
                tot["over"] += int(over.sum())
                tot["max_ulps"] = max(tot["max_ulps"], d["max_ulps"])
                tot["max_abs"] = max(tot["max_abs"], d["max_abs"])
                tot["max_rel_rms"] = max(tot["max_rel_rms"], d["max_rel_rms"])
                if over.any():
                    idx = np.argwhere(over)[0].tolist()
                    problems.append(f"{doc_id}: {int(over.sum())} K/V elements beyond {args.max_ulps} ulp; first at "
                                    f"[block {fresh[idx[0]]}, layer {idx[1]}, {'KV'[idx[2]]}, token {idx[3]}, "
                                    f"head {idx[4]}, dim {idx[5]}]: {float(fa[tuple(idx)])} vs {float(fb[tuple(idx)])}")
            report["documents"].append(d)
        tot["equal_fraction"] = tot["equal"] / max(tot["elements"], 1)
        report["totals"] = tot
    if not report["documents"]:
        problems.append("no documents compared")
    report["problems"] = problems
    report["ok"] = not problems
    t = report.get("totals", {})
    print(f"compare_stores: {len(report['documents'])} documents, {t.get('blocks', 0)} distinct blocks, "
          f"{t.get('elements', 0)} K/V elements: {100 * t.get('equal_fraction', 0):.2f}% bit-equal, "
          f"max {t.get('max_ulps', 0):.2f} ulp ({report.get('dtype')}), max |diff| {t.get('max_abs', 0):.3g} "
          f"({t.get('max_rel_rms', 0):.3g} of the slice RMS), {t.get('over', 0)} beyond {args.max_ulps} ulp")
    for p in problems[:20]:
        print("  problem:", p)
    print("compare_stores:", "OK" if report["ok"] else "DIFFERENT")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit:
        raise
    except Exception as ex:  # a store that does not open, a bad ids file
        print(f"compare_stores: error: {type(ex).__name__}: {ex}", file=sys.stderr)
        sys.exit(2)
