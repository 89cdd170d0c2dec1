#!/usr/bin/env bash
# bench.sh: store throughput over a GlusterFS mount (issue 12's benchmark; not a timed test).
#
#   sudo scripts/gluster/bench.sh [--out DIR] [--blocks N] [--docs N] [--seconds S]
#
# 1. `ucm bench store` on node n1's mount: dump and load against the raw write and read rate of
#    the same mount, measured in the same run by the bench itself.
# 2. Load throughput with 1, 2 and 4 reader nodes: a sharded store precomputed from real documents
#    (the real model) on the volume, read by build/bin/ucm_shard_reader on k nodes at once for S
#    seconds each (every registered chain again and again, every block checksum-verified), against
#    the raw read rate of the same data files through the same k mounts at once (dd, O_DIRECT when
#    the mount allows it), measured right before.
# Prints a markdown table and writes DIR/bench.json.
set -euo pipefail
. "$(dirname "$0")/common.sh"
OUT=/tmp/ucm-gluster-bench-$(date +%Y%m%d-%H%M%S)
BLOCKS=1024
NDOCS=8
SECS=15
while (($#)); do
  case $1 in
    --out) OUT=$2; shift 2 ;;
    --blocks) BLOCKS=$2; shift 2 ;;
    --docs) NDOCS=$2; shift 2 ;;
    --seconds) SECS=$2; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
need_root_and_build
mkdir -p "$OUT/corpus"
"$C" down >/dev/null 2>&1 || true
"$C" up --nodes 4 >"$OUT/cluster-up.log" 2>&1
trap '"$C" down >/dev/null 2>&1 || true' EXIT

log "ucm bench store on n1's mount ($BLOCKS blocks)"
on n1 "$UCM" bench store --store "$(mnt n1)" --blocks "$BLOCKS" --lookup-blocks 0 --deep-queue-depth 0 \
  --buffered-threads 0 --json >"$OUT/bench_store.json" 2>"$OUT/bench_store.err" || {
  echo "ucm bench store failed:"; tail -5 "$OUT/bench_store.err"; }

pick_corpus "$OUT/corpus" "$NDOCS" 6000 12000
log "precompute $(ls "$OUT/corpus" | wc -l) documents into a sharded store on the volume"
UCM_SHARD=n1 on n1 "$UCM" precompute --model "$MODEL" --corpus "$OUT/corpus" --template "$REPO/configs/template_chat.txt" \
  --store "$(mnt n1)/store" --max-doc-tokens 2048 --batch-tokens 2048 --json >"$OUT/precompute.json" 2>"$OUT/precompute.err"

: >"$OUT/readers.tsv"
for k in 1 2 4; do
  # Raw: every data file of the store read once through each of the k mounts at once.
  sync; echo 3 >/proc/sys/vm/drop_caches
  t0=$(date +%s.%N)
  pids=()
  for i in $(seq 1 "$k"); do
    on "n$i" sh -c 'for f in "$0"/shards/*/data/*.ucmd; do dd if="$f" of=/dev/null bs=4M iflag=direct 2>/dev/null || dd if="$f" of=/dev/null bs=4M 2>/dev/null; done' "$(mnt "n$i")/store" &
    pids+=($!)
  done
  wait "${pids[@]}"
  t1=$(date +%s.%N)
  bytes=$(du -cb "$(mnt n1)"/store/shards/*/data/*.ucmd | tail -1 | cut -f1)
  raw=$(python3 -c "print($bytes * $k / ($t1 - $t0) / 1e9)")
  # ucm: k reader nodes for SECS seconds.
  sync; echo 3 >/proc/sys/vm/drop_caches
  pids=()
  for i in $(seq 1 "$k"); do
    on "n$i" "$READER" "$(mnt "n$i")/store" --seconds "$SECS" >"$OUT/reader-$k-$i.json" 2>/dev/null &
    pids+=($!)
  done
  wait "${pids[@]}"
  python3 - "$OUT" "$k" "$raw" >>"$OUT/readers.tsv" <<'PY'
import json, sys
out, k, raw = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
r = [json.load(open(f"{out}/reader-{k}-{i}.json")) for i in range(1, k + 1)]
gbs = sum(x["bytes_ok"] / x["seconds"] for x in r) / 1e9
errs = sum(x["errors"] + x["wrong_bytes"] for x in r)
print(f"{k}\t{gbs:.3f}\t{raw:.3f}\t{gbs / raw:.2f}\t{errs}")
PY
  log "readers=$k: $(tail -1 "$OUT/readers.tsv")"
done

python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
res = {"readers": []}
try:
    b = json.load(open(f"{out}/bench_store.json"))
    res["bench_store"] = b
    print("ucm bench store on a GlusterFS FUSE mount (keys as reported):")
    for k, v in b.items():
        if isinstance(v, (int, float, str)): print(f"  {k}: {v}")
        elif isinstance(v, dict): print(f"  {k}: " + ", ".join(f"{a}={c}" for a, c in v.items() if isinstance(c, (int, float, str))))
except Exception as e:
    print(f"bench store: no report ({e})")
print()
print("| reader nodes | ucm load GB/s (all nodes) | raw read GB/s (same files, same mounts) | ratio | errors |")
print("|---|---|---|---|---|")
for line in open(f"{out}/readers.tsv"):
    k, gbs, raw, ratio, errs = line.split()
    res["readers"].append({"nodes": int(k), "load_gbps": float(gbs), "raw_gbps": float(raw), "ratio": float(ratio), "errors": int(errs)})
    print(f"| {k} | {gbs} | {raw} | {ratio} | {errs} |")
json.dump(res, open(f"{out}/bench.json", "w"), indent=1)
print(f"\nwritten {out}/bench.json")
PY
