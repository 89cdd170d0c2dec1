#!/usr/bin/env python3
"""`ucm events` at scale: the seconds to publish a store's snapshot and the publisher's peak RSS,
for stores of N blocks (issue 59). Builds (or reuses) a synthetic store of N blocks with token ids
in chains of 64 blocks (a tiny namespace: 1 layer, 1 KV head, head_dim 16, bf16: 1 KiB a block),
then runs `ucm events STORE --run-for 1ms --json` and reads its report (`seconds`,
`snapshot_blocks`, `batches`) and its peak RSS (getrusage of the child).

    scripts/bench_events.py --blocks 100000 --blocks 1000000 [--dir out/bench-events] [--json]

Not in CI (1M blocks: about 1 GiB of data files and minutes to write). Needs a built ucm and
libucm (UCM_LIB, or build/lib/libucm.so)."""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib/python"))
os.environ.setdefault("UCM_LIB", str(ROOT / "build/lib/libucm.so"))
import ucm  # noqa: E402

DESC = {"model_id": "bench-events", "weights_digest": "", "dtype": "bf16", "block_size": 16, "num_layers": 1,
        "num_kv_heads": 1, "head_dim": 16, "layout": 1}
CHAIN = 64


def build(path: Path, blocks: int) -> None:
    """A store of `blocks` blocks with ids, in chains of CHAIN blocks (made once; reused)."""
    if (path / "UCMSTORE").exists():
        return
    t0 = time.time()
    rng = np.random.default_rng(1)
    with ucm.Store(str(path), mode="c") as s:
        ns = s.register_namespace(DESC)
        payload = np.zeros((CHAIN,) + tuple(ns.payload_shape()), dtype=np.uint16)
        for c in range(blocks // CHAIN):
            ids = rng.integers(0, 49152, size=CHAIN * 16, dtype=np.int64)
            hs = ucm.hash_blocks(ns.hash_seed, ids, 16)
            st = np.asarray(s.dump(ns, hs, ucm.parents_of(ns.hash_seed, hs), payload, tokens=ids))
            if (st != 0).any():
                raise SystemExit(f"dump failed: {ucm.code_name(int(st[st != 0][0]))}")
            if c % 1000 == 0:
                print(f"bench_events: {path.name}: {c * CHAIN}/{blocks} blocks, {time.time() - t0:.0f} s",
                      file=sys.stderr)
    print(f"bench_events: {path.name}: {blocks} blocks written in {time.time() - t0:.0f} s", file=sys.stderr)


def run(path: Path, ucm_bin: str) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.time()
    p = subprocess.run([ucm_bin, "events", str(path), "--endpoint", "tcp://127.0.0.1:0", "--replay-endpoint", "",
                        "--poll", "10ms", "--run-for", "1ms", "--json"], capture_output=True, text=True)
    wall = time.time() - t0
    if p.returncode:
        raise SystemExit(p.stderr)
    rep = json.loads(p.stdout)
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB; the largest child so far
    return {"blocks": rep["snapshot_blocks"], "seconds": rep["seconds"], "wall_seconds": wall,
            "batches": rep["batches"], "peak_rss_mib": rss / 1024 if rss > before else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", type=int, action="append", help="store sizes (repeat); default 100000")
    ap.add_argument("--dir", default=str(ROOT / "out/bench-events"))
    ap.add_argument("--ucm", default=str(ROOT / "build/bin/ucm"))
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rows = []
    for n in a.blocks or [100000]:
        path = Path(a.dir) / f"store-{n}"
        path.parent.mkdir(parents=True, exist_ok=True)
        build(path, n)
        rows.append(run(path, a.ucm))
    if a.json:
        print(json.dumps(rows))
    else:
        for r in rows:
            print(f"{r['blocks']:>10} blocks: snapshot published in {r['seconds']:.1f} s "
                  f"({r['wall_seconds']:.1f} s wall), {r['batches']} batches, peak RSS {r['peak_rss_mib']} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
