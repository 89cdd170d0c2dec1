# scripts/gluster/common.sh: what fault_test.sh and bench.sh share (sourced, not run): paths of
# the repository's binaries, the model and the corpus pages, the node helpers and the corpus pick.
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
C=$REPO/scripts/gluster/cluster.sh
UCM=$REPO/build/bin/ucm
READER=$REPO/build/bin/ucm_shard_reader
MODEL=${UCM_MODEL_DIR:-$REPO/models/SmolLM2-135M-Instruct}
DOCS_DIR=/usr/share/doc/python3.11/html/_sources/library

log() { echo "[$(date +%T)] $*" >&2; }
# on NODE CMD...: CMD in NODE's network namespace with the host mounts (cluster.sh exec).
on() { local n=$1; shift; "$C" exec "$n" -- "$@"; }
# mnt NODE: the node's mount of the volume.
mnt() { "$C" mnt "$1"; }

# pick_corpus DIR N MIN MAX: copies the first N python3.11-doc pages (sorted by name) of MIN..MAX
# bytes into DIR (deterministic).
pick_corpus() {
  local dir=$1 n=$2 lo=$3 hi=$4 f s
  mkdir -p "$dir"
  for f in $(cd "$DOCS_DIR" && ls | sort); do
    s=$(stat -c %s "$DOCS_DIR/$f")
    if ((s >= lo && s <= hi)) && (($(ls "$dir" | wc -l) < n)); then cp "$DOCS_DIR/$f" "$dir/"; fi
  done
}

# need_root_and_build: refuses to run without root, the built binaries, the model or GlusterFS.
need_root_and_build() {
  [[ $(id -u) == 0 ]] || { echo "needs root (network namespaces, FUSE mounts)" >&2; exit 1; }
  local f
  for f in "$UCM" "$READER" "$MODEL/config.json"; do
    [[ -e $f ]] || { echo "missing $f: run scripts/build.sh and scripts/fetch_model.py" >&2; exit 1; }
  done
  command -v glusterd >/dev/null ||
    { echo "glusterfs-server is not installed (apt-get install glusterfs-server)" >&2; exit 1; }
}
