#!/usr/bin/env bash
# fault_test.sh: the multi-node test of a sharded store (store_v1.md §11) on a real GlusterFS
# volume, with faults. Nodes are network namespaces with their own FUSE mount of one volume
# (scripts/gluster/cluster.sh). Not part of the CI suite (it needs root, FUSE and ~5 minutes);
# tests/precompute (ShardWorkersWriteOneShardedStoreInParallelWhileGcRuns) and
# tests/store/test_sharded_store.cc are its light, local-file-system versions in CI.
#
#   sudo scripts/gluster/fault_test.sh [--out DIR] [--docs N] [--keep]
#
# Nodes: n1, n2 writers (`ucm precompute --shard 0/2` and `1/2` of real documents, the real
# model), n3, n4 readers (build/bin/ucm_shard_reader: one open handle each, loading every
# registered document's chain again and again, an XXH3 digest of every block it loaded), n5 gc
# (`ucm gc` in a loop, the lease held across the store). Faults, in this order:
#   A. SIGKILL of writer n1 in the middle of its dumps, then `--resume` on n1;
#   B. SIGKILL of a gc holding the lease (on n5), and a gc on n3 that takes the lease over;
#   C. the brick server killed and restarted under the readers;
#   D. gc evicting half the store with --grace 0 under the readers: data files compacted and
#      deleted while readers hold their locations;
#   E. (during A's resume) node n2 killed while writing (`cluster.sh node-kill`: every process of
#      the node and its FUSE client): its shard stays readable and a worker on n5 resumes it.
# Checks (each printed as PASS / FAIL, exit 1 on any FAIL):
#   * no wrong bytes: no block hash was ever read with two different digests by any reader, and
#     every digest a reader saw equals the final one of that block, when the block is still there;
#   * every acknowledged block present or cleanly evicted: every block of a document registered
#     when the writers finished is, at the end, either present with the same bytes or absent, and
#     every document still registered has its whole chain (a final reader pass: chain_misses 0);
#   * misses instead of errors while the file system is away: readers' error count is 0 (their
#     failed loads are NOT_FOUND);
#   * the gc lease is taken over after the holder's SIGKILL; `ucm inspect --verify` exits 0.
set -euo pipefail
. "$(dirname "$0")/common.sh"
OUT=/tmp/ucm-fault-$(date +%Y%m%d-%H%M%S)
NDOCS=16
KEEP=0
while (($#)); do
  case $1 in
    --out) OUT=$2; shift 2 ;;
    --docs) NDOCS=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
need_root_and_build
mkdir -p "$OUT/corpus"
FAILS=0
check() {  # check NAME CONDITION-EXIT-STATUS DETAIL
  if [[ $2 == 0 ]]; then echo "PASS  $1  ($3)"; else echo "FAIL  $1  ($3)"; FAILS=$((FAILS + 1)); fi
  echo "$1 $2 $3" >>"$OUT/checks.txt"
}
jget() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, {'d': d}))" "$@"; }

# Corpus: NDOCS python3.11-doc pages of 3-8 KB (sorted, deterministic), on local disk.
pick_corpus "$OUT/corpus" "$NDOCS" 3000 8000
log "corpus: $(ls "$OUT/corpus" | wc -l) documents in $OUT/corpus"

"$C" down >/dev/null 2>&1 || true
"$C" up --nodes 5 --coherent >"$OUT/cluster-up.log" 2>&1
[[ $KEEP == 1 ]] || trap '"$C" down --keep-logs "$OUT/gluster-logs" >/dev/null 2>&1 || true' EXIT
store() { echo "$(mnt "$1")/store"; }
# In the background: `bg_on NODE CMD... &` runs CMD as the job itself (every level execs), so $!
# is the real process and kill -9 $! kills it, not a wrapper.
bg_on() { local n=$1; shift; exec "$C" exec "$n" -- "$@"; }

precompute() {  # precompute NODE SHARD OUTFILE (run it with &: it execs)
  exec "$C" exec "$1" -- "$UCM" precompute --model "$MODEL" --corpus "$OUT/corpus" --template "$REPO/configs/template_chat.txt" \
    --store "$(store "$1")" --shard "$2/2" --max-doc-tokens 1024 --batch-tokens 1024 --resume --json \
    >"$3" 2>"$3.err"
}

# ---- writers, readers, gc loop
log "writers n1, n2 start (precompute --shard 0/2, 1/2)"
precompute n1 0 "$OUT/w1.json" & W1=$!
precompute n2 1 "$OUT/w2.json" & W2=$!
bg_on n3 "$READER" "$(store n3)" --seconds 100000 --digests "$OUT/r3.digests" >"$OUT/r3.json" 2>"$OUT/r3.err" & R3=$!
bg_on n4 "$READER" "$(store n4)" --seconds 100000 --digests "$OUT/r4.digests" >"$OUT/r4.json" 2>"$OUT/r4.err" & R4=$!
GCSTOP=$OUT/gc.stop
( i=0; while [[ ! -e $GCSTOP ]]; do
    on n5 "$UCM" gc "$(store n5)" --grace 0 --lease-ttl 10s --lease-wait 60s --json >"$OUT/gc-loop-$i.json" 2>"$OUT/gc-loop-$i.err" || true
    i=$((i + 1)); sleep 2
  done ) & GCL=$!

# ---- A: SIGKILL writer n1 mid-dump, then resume it
docs_of_shard() {  # documents registered in shard $1 (0 while the store is not there yet)
  local j
  j=$(on n5 "$UCM" inspect "$(store n5)" --docs --json 2>/dev/null) || true
  python3 -c "import json,sys; d=json.load(sys.stdin); print(sum(1 for x in d.get('docs',[]) if x.get('shard')=='$1'))" \
    <<<"$j" 2>/dev/null || echo 0
}
resume() {  # resume NODE SHARD OUTFILE: precompute --resume, retried while BUSY (exit 4): a dead
            # writer's flock is released by the brick a moment after its death
  local rc=0
  for _ in $(seq 1 60); do
    rc=0; ( precompute "$1" "$2" "$3" ) || rc=$?
    [[ $rc == 4 ]] || return $rc
    sleep 0.5
  done
  return $rc
}
wait_docs() {  # wait_docs SHARD N PID: until SHARD has N registered documents or its writer PID is gone (10 min at most)
  for _ in $(seq 1 600); do
    [[ $(docs_of_shard "$1") -ge $2 ]] && break
    kill -0 "$3" 2>/dev/null || break
    sleep 1
  done
}
wait_docs precompute-0 2 $W1
A_KILLED=1
if kill -0 $W1 2>/dev/null; then
  kill -9 $W1; wait $W1 2>/dev/null || true
  log "A: SIGKILLed writer n1 (pid $W1) after $(docs_of_shard precompute-0) registered documents; resuming it on n1"
  resume n1 0 "$OUT/w1-resume.json" & W1=$!
  A_KILLED=0
fi
check "A writer SIGKILLed mid-run" $A_KILLED "n1 had registered >= 2 documents and was still writing"

# ---- E: node n2 dies while writing (every process of the node and its mount gone); its shard
# stays readable, and a worker on another node (n5) resumes that shard
wait_docs precompute-1 3 $W2
E_KILLED=1
if kill -0 $W2 2>/dev/null; then
  "$C" node-kill n2 >>"$OUT/node.log" 2>&1
  wait $W2 2>/dev/null || true
  E_DOCS=$(docs_of_shard precompute-1)
  log "E: node n2 killed while writing, its shard has $E_DOCS registered documents; resuming shard 1 on n5"
  resume n5 1 "$OUT/w2-resume.json" & W2=$!
  E_KILLED=0
fi
check "E writer node killed mid-run" $E_KILLED "n2 had registered >= 3 documents and was still writing"
W1RC=0; wait $W1 || W1RC=$?
W2RC=0; wait $W2 || W2RC=$?
check "writers finished" $((W1RC + W2RC)) "shard 0 exit $W1RC (after A), shard 1 exit $W2RC (after E, on n5)"
touch "$GCSTOP"; wait $GCL || true; rm -f "$GCSTOP"

# What the writers acknowledged: every registered document's blocks, with their bytes.
on n5 "$READER" "$(store n5)" --seconds 0 --digests "$OUT/acked.digests" >"$OUT/acked.json" 2>/dev/null || true
ACKED_DOCS=$(jget "$OUT/acked.json" "d['documents_seen']")
log "acknowledged: $ACKED_DOCS documents, $(wc -l <"$OUT/acked.digests") blocks"
check "all documents registered" $([[ $ACKED_DOCS == $(ls "$OUT/corpus" | wc -l) ]] && echo 0 || echo 1) \
  "$ACKED_DOCS of $(ls "$OUT/corpus" | wc -l)"

# ---- B: SIGKILL the gc holding the lease, another node takes it over
B_OK=1
for attempt in 1 2 3 4 5; do
  bg_on n5 "$UCM" gc "$(store n5)" --verify --grace 0 --lease-ttl 6s --json >"$OUT/gc-killed.json" 2>&1 & G=$!
  for _ in $(seq 1 100); do [[ -e $(store n5)/gc/LEASE ]] && break; sleep 0.05; done
  if [[ -e $(store n5)/gc/LEASE ]] && kill -0 $G 2>/dev/null; then
    HOLDER=$(python3 -c "import json; print(json.load(open('$(store n5)/gc/LEASE'))['holder'])" 2>/dev/null || echo "?")
    [[ ${HOLDER#*:} == $G:* ]] || log "B: warning: lease holder $HOLDER is not the gc we started (pid $G)"
    kill -9 $G; wait $G 2>/dev/null || true
    log "B: SIGKILLed gc $HOLDER (attempt $attempt); gc on n3 waits for its lease"
    T0=$(date +%s.%N)
    on n3 "$UCM" gc "$(store n3)" --grace 0 --lease-wait 60s --json >"$OUT/gc-takeover.json" 2>"$OUT/gc-takeover.err" || true
    T1=$(date +%s.%N)
    FROM=$(jget "$OUT/gc-takeover.json" "d.get('lease_taken_over_from','')" 2>/dev/null || echo "")
    B_WAIT=$(python3 -c "print(round($T1-$T0,1))")
    [[ $FROM == "$HOLDER" ]] && B_OK=0
    break
  fi
  wait $G 2>/dev/null || true
done
check "B gc lease taken over after SIGKILL" $B_OK "killed holder ${HOLDER:-none}, taken over from '${FROM:-}' after ${B_WAIT:-?} s"

# ---- C: brick server killed and restarted under the readers
sleep 3
"$C" brick-stop >"$OUT/brick.log" 2>&1
log "C: brick stopped; readers keep loading for 10 s"
sleep 10
"$C" brick-start >>"$OUT/brick.log" 2>&1
log "C: brick started again"
sleep 5

# ---- D: gc evicts half the store under the readers, data files deleted (grace 0)
TOTAL=$(on n5 "$UCM" inspect "$(store n5)" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['bytes'])")
printf 'gc: {compact_dead_ratio: 0.2, grace: 0s}\n' >"$OUT/gc.yaml"
on n5 "$UCM" gc "$(store n5)" --config "$OUT/gc.yaml" --max-bytes $((TOTAL / 2)) --json >"$OUT/gc-evict.json" 2>"$OUT/gc-evict.err" || true
EVICTED=$(jget "$OUT/gc-evict.json" "d['evicted_blocks']" 2>/dev/null || echo 0)
DELETED=$(jget "$OUT/gc-evict.json" "d['files_deleted'] + d['files_compacted']" 2>/dev/null || echo 0)
check "D gc evicted under readers" $([[ $EVICTED -gt 0 && $DELETED -gt 0 ]] && echo 0 || echo 1) \
  "$EVICTED blocks evicted, $DELETED data files compacted or deleted, readers running"
sleep 8

# ---- stop the readers, final state
kill -TERM $R3 $R4 2>/dev/null || true
wait $R3 2>/dev/null || true
wait $R4 2>/dev/null || true
on n5 "$READER" "$(store n5)" --seconds 0 --digests "$OUT/final.digests" >"$OUT/final.json" 2>/dev/null || true
IRC=0; on n5 "$UCM" inspect "$(store n5)" --verify --json >"$OUT/inspect-final.json" 2>"$OUT/inspect-final.err" || IRC=$?
check "inspect --verify at the end" $IRC "$(jget "$OUT/inspect-final.json" "str(d['verified']) + ' blocks verified, ' + str(d['corrupt_total']) + ' corrupt, ' + str(len(d['shards'])) + ' shards'")"

# ---- the checks on bytes, acknowledged blocks and errors
python3 - "$OUT" <<'PY' >"$OUT/verdict.txt"
import json, sys
out = sys.argv[1]
def digests(p):
    d = {}
    for line in open(p):
        k, v = line.split()
        d[k] = v
    return d
final, acked = digests(f"{out}/final.digests"), digests(f"{out}/acked.digests")
r = {n: json.load(open(f"{out}/r{n}.json")) for n in (3, 4)}
seen = {n: digests(f"{out}/r{n}.digests") for n in (3, 4)}
wrong = sum(r[n]["wrong_bytes"] for n in r)
wrong += sum(1 for n in seen for k, v in seen[n].items() if k in final and final[k] != v)
lost = sum(1 for k, v in acked.items() if k in final and final[k] != v)
present = sum(1 for k in acked if k in final)
fin = json.load(open(f"{out}/final.json"))
errors = sum(r[n]["errors"] for n in r)
print(f"wrong_bytes {wrong}")
print(f"acked_changed {lost}")
print(f"acked_present {present} of {len(acked)} (the rest evicted by gc)")
print(f"final_chain_misses {fin['chain_misses']} of {fin['documents_seen']} registered documents")
print(f"reader_errors {errors}")
for n in r:
    print(f"reader n{n}: {r[n]['passes']} passes, {r[n]['blocks_ok']} blocks ok "
          f"({r[n]['bytes_ok'] / 1e9:.2f} GB), {r[n]['misses']} misses, {r[n]['chain_misses']} chain misses, "
          f"{r[n]['errors']} errors {r[n]['error_kinds']}, {r[n]['distinct_blocks']} distinct blocks")
PY
cat "$OUT/verdict.txt"
v() { sed -n "s/^$1 \([0-9]*\).*/\1/p" "$OUT/verdict.txt"; }
check "no wrong bytes" "$(v wrong_bytes)" "$(grep '^wrong_bytes' "$OUT/verdict.txt")"
check "acknowledged blocks present or cleanly evicted" "$(( $(v acked_changed) + $(v final_chain_misses) ))" \
  "$(grep '^acked_present' "$OUT/verdict.txt"); $(grep '^final_chain_misses' "$OUT/verdict.txt")"
check "misses instead of errors while the file system was away" "$(v reader_errors)" "$(grep '^reader_errors' "$OUT/verdict.txt")"
echo "results in $OUT (checks.txt, verdict.txt, *.json)"
((FAILS == 0)) || { echo "$FAILS check(s) FAILED"; exit 1; }
echo "all checks passed"
