#!/usr/bin/env bash
# cluster.sh: simulate several machines sharing a GlusterFS volume, on one Linux host.
#
# Layout: bridge ucmbr0; netns ucm-srv (10.77.0.1) runs a private glusterd (own working dir, run
# dir and CLI socket under DIR, bound to 10.77.0.1) and the one brick (DIR/brick) of volume
# ucmvol; netns ucm-nK (10.77.0.(10+K)) runs node K's FUSE client, started with
# `nsenter --net=/run/netns/ucm-nK glusterfs ... DIR/mnt/nK`: the client's TCP connections come
# from the node's address while the mount lands in the host mount namespace (`ip netns exec`
# would put it in a private mount namespace, invisible outside). No /etc/hosts entry is needed
# (bricks are named by IP). Usage: --help. Details: docs/gluster_harness.md.
#
# Findings (GlusterFS 10.3, kernel 6.18, brick on ext4; measured with this script):
# 1. Files written through n1 read back byte-identical through n2 (cmp), buffered and O_DIRECT.
#    O_DIRECT opens succeed and O_DIRECT goes through to the brick's file system: aligned I/O is
#    fine, but an unaligned O_DIRECT write *returns success* (write-behind) and its EINVAL comes
#    only at fsync/fdatasync/close, the data lost. Other nodes see size changes up to ~1 s late
#    (attribute caches), even after the writer's fdatasync; `up --coherent` makes it immediate.
# 2. flock is exclusive across mounts (flock -n from n2 fails while n1 holds LOCK_EX; shared
#    too; blocking flock waits for the release). Per-writer lock files work across nodes while
#    the brick and the network are healthy. node-kill n1: n2 gets the lock 0.13 s later.
#    node-kill --hard (no FIN reaches the server): 41.7 s with gluster's defaults, 5.7 s with
#    `up --node-timeout 6`. Locks are NOT kept across a brick restart, a brick freeze longer than
#    ~ping-timeout, or a partition longer than the node timeout: the brick forgets them, another
#    node can take them, and the old holder's client reopens its fds when it reconnects: by
#    default (client.strict-locks off) without telling it (re-flock even succeeds if free);
#    with `--set client.strict-locks=on` the lock's fd fails with EBADFD from then on.
# 3. rename over a target from n1 while n2 reads in a loop: never a torn or mixed read (300
#    versions, 4 KiB and 1 MiB). But the open() on n2 fails now and then with ENOENT or ESTALE
#    (also on the writer's own mount): readers must retry. Default mode shows n2 stale versions
#    for up to ~1 s (never going backwards). renameat2(RENAME_NOREPLACE) gives EINVAL here.
# 4. O_CREAT|O_EXCL is exclusive across mounts: 3 nodes x 500 names, each created exactly once;
#    100/100 noclobber races between n1 and n2 had exactly one winner.
# 5. brick-stop (SIGKILL): every operation fails at once with ENOTCONN (no hang); brick-start:
#    clients read again 1-3 s later (they retry every 3 s); open fds work again. brick-stop
#    --freeze (SIGSTOP) with the ping-timeout 5 that `up` sets: operations hang ~7 s, then
#    ENOTCONN; after brick-start (SIGCONT) they work within 0.1 s. With gluster's default
#    ping-timeout 42 a read hung 82 s.
# 6. down then up works (down ~3 s, up ~2-4 s); down after an up killed at any point leaves no
#    mounts, processes, namespaces, links, files (also none under /var/lib/glusterd etc.).
set -euo pipefail

# ---------------------------------------------------------------- configuration
BR=ucmbr0                       # the "switch"
NET=10.77.0                     # /24; srv = .1, node K = .(10+K)
SRV_NS=ucm-srv
SRV_IP=$NET.1
VOL=ucmvol
STATE_DIR=/run/ucm-gluster      # remembers BASE and NODES between calls (tmpfs: gone at reboot)
STATE=$STATE_DIR/state
DEFAULT_BASE=/var/tmp/ucm-gluster
MARKER=.ucm-gluster-harness     # `down` only deletes a BASE that holds this file
# glusterd writes some things to fixed system paths whatever its configuration (brick sockets in
# /run/gluster, brick logs and cmd_history.log in /var/log/glusterfs, hook and geo-replication
# templates in /var/lib/glusterd). `up` lists what exists there before it starts glusterd;
# `down` removes what was added since (only when no other glusterd is left running).
SYS_PATHS=(/var/lib/glusterd /var/log/glusterfs /run/gluster /run/glusterd.socket)
PRE=$STATE_DIR/preexisting

BASE=${UCM_GLUSTER_BASE:-}
NODES=
COHERENT=
PING_TIMEOUT=5
VOLUME_SETS=()                  # extra "key=value" volume options from up --set
NODE_TIMEOUT=                   # empty: gluster's default (a silent client is dropped after ~42 s)

usage() {
  cat <<EOF
Usage: $0 [--base DIR] COMMAND [ARGS]

Simulated cluster: network namespaces as machines, one GlusterFS volume as the shared file system.
  bridge $BR, server netns $SRV_NS ($SRV_IP: glusterd + the one brick),
  node netns ucm-nK ($NET.(10+K)), each with its own FUSE client mounted at DIR/mnt/nK
  (client process in the node's netns, mount visible in the host mount namespace).

Commands:
  up [--nodes N] [--base DIR] [--ping-timeout S] [--node-timeout S] [--coherent] [--set K=V]...
        Create bridge, namespaces, a private glusterd (state under DIR/glusterd), volume $VOL
        (brick DIR/brick, network.ping-timeout S, default $PING_TIMEOUT) and N mounts (default 2).
        Idempotent: what exists is kept; a larger N adds nodes.
        --node-timeout S: the brick drops a client that went silent (node-kill --hard) and
        releases its locks after about S s instead of gluster's default ~42 s (server.keepalive-*,
        server.tcp-user-timeout). Only for clients that connect after the change.
        --coherent: no client-side metadata caching (FUSE attribute/entry/negative timeouts 0,
        performance.stat-prefetch and performance.quick-read off), so a node sees another
        node's size changes, renames and creates at once instead of up to ~1 s late.
        Sticks until down; existing mounts keep their options (node-kill + node-start them).
        --set KEY=VALUE: any other volume option (gluster volume set), e.g.
        --set client.strict-locks=on (see docs/gluster_harness.md on locks).
  down [--keep-logs DIR]
        Unmount everything, stop+delete the volume, kill every process in the harness namespaces
        (glusterd, glusterfsd, clients, commands started by exec), delete namespaces, bridge and DIR.
        Also removes what glusterd added under /var/lib/glusterd, /var/log/glusterfs, /run/gluster.
        Safe after a half-failed up and when nothing is up. --keep-logs: copy the logs there first.
  exec NODE -- CMD...
        Run CMD in NODE's network namespace (host mount namespace, own UTS namespace with
        hostname ucm-NODE) with UCM_NODE=NODE, UCM_MNT=DIR/mnt/NODE.
        NODE: n1, 1 or ucm-n1; 'srv' for the server namespace (no UCM_MNT).
        A node's workload must use its own UCM_MNT: the FUSE client of the mount a process
        uses, not the process's netns, decides which "machine" its file I/O goes through.
  mnt NODE
        Print NODE's mount path.
  brick-stop [--freeze]
        Default: SIGKILL the brick process (a crashed brick / file server: clients get ENOTCONN
        at once) and wait until it is reaped (1-2 s: glusterd would take the zombie for a
        running brick). --freeze: SIGSTOP it instead (a hung server: clients block for about
        network.ping-timeout plus a few seconds, then get ENOTCONN).
  brick-start
        SIGCONT a frozen brick, or restart a killed one (gluster volume start $VOL force);
        waits until the brick is online and every mounted client reads again.
  node-kill NODE [--hard]
        Node death: SIGKILL every process in NODE's netns (its FUSE client included) and lazily
        unmount its mount. The dying client's kernel sockets send FIN, so the brick drops the
        node's locks at once. --hard: a power loss instead: the node's link is cut first and the
        netns deleted, so the server hears nothing and keeps the node's locks until its TCP
        keepalive gives up (~42 s; up --node-timeout).
  node-start NODE
        (Re)create NODE's namespace and link if needed and mount again (after node-kill).
  net-down NODE | net-up NODE
        Cut / restore NODE's link (a partition; processes keep running).
  status
        State, volume info and status, mounts, namespaces and their processes.
  help, --help

DIR defaults to \$UCM_GLUSTER_BASE, else the DIR of the running cluster, else $DEFAULT_BASE.
Needs root, iproute2, nsenter, glusterfs-server and glusterfs-client.
EOF
}

log() { printf '[cluster] %s\n' "$*" >&2; }
die() { printf '[cluster] error: %s\n' "$*" >&2; exit 1; }

load_state() {
  if [[ -r $STATE ]]; then
    local b n
    b=$(sed -n 's/^BASE=//p' "$STATE"); n=$(sed -n 's/^NODES=//p' "$STATE")
    [[ -z $BASE ]] && BASE=$b
    [[ -z $NODES ]] && NODES=$n
    [[ -z $COHERENT ]] && COHERENT=$(sed -n 's/^COHERENT=//p' "$STATE")
  fi
  [[ -n $COHERENT ]] || COHERENT=0
  [[ -n $BASE ]] || BASE=$DEFAULT_BASE
  [[ -n $NODES ]] || NODES=0
  BASE=${BASE%/}
  return 0
}
save_state() {
  mkdir -p "$STATE_DIR"
  printf 'BASE=%s\nNODES=%s\nCOHERENT=%s\n' "$BASE" "$NODES" "$COHERENT" >"$STATE"
}

# Paths derived from BASE.
paths() {
  GD_DIR=$BASE/glusterd          # glusterd working directory (private: not /var/lib/glusterd)
  RUN_DIR=$BASE/run              # glusterd run directory, pid files, sockets
  LOG_DIR=$BASE/logs
  GD_SOCK=$RUN_DIR/glusterd.socket
  GD_PID=$RUN_DIR/glusterd.pid
  GD_VOL=$BASE/glusterd.vol
  BRICK=$BASE/brick
}

gcli() { timeout "${GCLI_TIMEOUT:-60}" gluster --mode=script --glusterd-sock="$GD_SOCK" --log-file="$LOG_DIR/cli.log" "$@"; }

# n1 | 1 | ucm-n1 -> n1 ; srv | ucm-srv -> srv
norm_node() {
  local n=${1:-}
  n=${n#ucm-}
  [[ $n =~ ^[0-9]+$ ]] && n=n$n
  [[ $n =~ ^(n[1-9][0-9]*|srv)$ ]] || die "bad node name '$1' (want n1, 1, ucm-n1 or srv)"
  echo "$n"
}
node_ip() { [[ $1 == srv ]] && echo "$SRV_IP" || echo "$NET.$((10 + ${1#n}))"; }
ns_of() { echo "ucm-$1"; }
veth_of() { echo "ucmv-$1"; }        # host side; the netns side is called eth0
mnt_of() { echo "$BASE/mnt/$1"; }
ns_exists() { [[ -e /run/netns/$1 ]]; }
is_mounted() { awk -v m="$1" '$2 == m { f = 1 } END { exit !f }' /proc/mounts; }
pid_alive() { [[ -n ${1:-} ]] && kill -0 "$1" 2>/dev/null; }

# ---------------------------------------------------------------- network
ensure_bridge() {
  if ! ip link show "$BR" &>/dev/null; then
    ip link add "$BR" type bridge
    log "bridge $BR created"
  fi
  ip link set "$BR" up
}

ensure_ns() {  # node-or-srv
  local n=$1 ns veth ip
  ns=$(ns_of "$n"); veth=$(veth_of "$n"); ip=$(node_ip "$n")
  if ! ns_exists "$ns"; then
    ip netns add "$ns"
    log "netns $ns created"
  fi
  ip -n "$ns" link set lo up
  if ! ip -n "$ns" link show eth0 &>/dev/null; then
    # A host end left from a deleted netns goes away by itself, but not always at once.
    ip link del "$veth" 2>/dev/null || true
    ip link add "$veth" type veth peer name eth0 netns "$ns"
    log "veth $veth <-> $ns:eth0 ($ip)"
  fi
  ip link set "$veth" master "$BR" up
  ip -n "$ns" addr replace "$ip/24" dev eth0
  ip -n "$ns" link set eth0 up
}

# ---------------------------------------------------------------- glusterd / volume
glusterd_pid() {  # ours: by its pid file, else the glusterd in the server netns
  local p
  p=$(cat "$GD_PID" 2>/dev/null || true)
  if pid_alive "$p" && [[ $(cat /proc/"$p"/comm 2>/dev/null) == glusterd ]]; then echo "$p"; return 0; fi
  if ns_exists "$SRV_NS"; then
    for p in $(ip netns pids "$SRV_NS" 2>/dev/null); do
      [[ $(cat /proc/"$p"/comm 2>/dev/null) == glusterd ]] && { echo "$p"; return 0; }
    done
  fi
  return 0
}

wait_glusterd() {  # seconds
  local i
  for ((i = 0; i < $1 * 5; i++)); do
    GCLI_TIMEOUT=5 gcli volume list &>/dev/null && return 0
    sleep 0.2
  done
  return 1
}

start_glusterd() {
  local p; p=$(glusterd_pid)
  if [[ -n $p ]]; then
    wait_glusterd 20 || die "glusterd (pid $p) does not answer (see $LOG_DIR/glusterd.log); run down"
    log "glusterd already running (pid $p)"
    return
  fi
  pgrep -x glusterd >/dev/null &&
    log "note: another glusterd is running; this one is separate (own socket, netns, state)"
  if [[ ! -e $PRE ]]; then
    mkdir -p "$STATE_DIR"
    find "${SYS_PATHS[@]}" -xdev 2>/dev/null | sort >"$PRE" || true
  fi
  mkdir -p "$GD_DIR" "$RUN_DIR" "$LOG_DIR"
  cat >"$GD_VOL" <<EOF
volume management
    type mgmt/glusterd
    option working-directory $GD_DIR
    option run-directory $RUN_DIR
    option glusterd-sockfile $GD_SOCK
    option transport-type socket
    option transport.socket.bind-address $SRV_IP
    option transport.socket.listen-port 24007
    option transport.socket.keepalive-time 10
    option transport.socket.keepalive-interval 2
    option transport.socket.read-fail-log off
    option ping-timeout 0
    option event-threads 1
    option max-port 60999
end-volume
EOF
  # nsenter --net (not `ip netns exec`): keep the host mount namespace, so that the brick process
  # (forked by glusterd) sees the host's file systems as they are.
  nsenter --net="/run/netns/$SRV_NS" glusterd -f "$GD_VOL" -p "$GD_PID" -l "$LOG_DIR/glusterd.log"
  wait_glusterd 20 || die "glusterd did not answer within 20 s (see $LOG_DIR/glusterd.log)"
  log "glusterd up (pid $(glusterd_pid)) at $SRV_IP:24007"
}

brick_pid() {  # the glusterfsd serving our brick, by its pid file, else by netns + comm
  local f p
  for f in "$RUN_DIR"/vols/"$VOL"/*.pid; do
    [[ -e $f ]] || continue
    p=$(cat "$f" 2>/dev/null || true)
    if pid_alive "$p" && [[ $(cat /proc/"$p"/comm 2>/dev/null) == glusterfsd ]]; then echo "$p"; return 0; fi
  done
  if ns_exists "$SRV_NS"; then
    for p in $(ip netns pids "$SRV_NS" 2>/dev/null); do
      [[ $(cat /proc/"$p"/comm 2>/dev/null) == glusterfsd ]] && { echo "$p"; return 0; }
    done
  fi
  return 0
}

ensure_volume() {
  mkdir -p "$BRICK"
  if ! gcli volume info "$VOL" &>/dev/null; then
    # force: the brick is on the root file system, which gluster refuses otherwise.
    gcli volume create "$VOL" "$SRV_IP:$BRICK" force >/dev/null
    log "volume $VOL created (brick $SRV_IP:$BRICK)"
  fi
  gcli volume set "$VOL" network.ping-timeout "$PING_TIMEOUT" >/dev/null
  log "volume $VOL: network.ping-timeout=$PING_TIMEOUT"
  if [[ -n $NODE_TIMEOUT ]]; then
    # How long the brick takes to notice a client that vanished without closing its connection
    # (node-kill --hard): TCP keepalive from the brick plus TCP_USER_TIMEOUT on its sockets.
    # Applies to connections made after the change.
    local ka=$(((NODE_TIMEOUT + 1) / 2))
    gcli volume set "$VOL" server.keepalive-time "$ka" >/dev/null
    gcli volume set "$VOL" server.keepalive-interval 1 >/dev/null
    gcli volume set "$VOL" server.keepalive-count "$((NODE_TIMEOUT - ka > 0 ? NODE_TIMEOUT - ka : 1))" >/dev/null
    gcli volume set "$VOL" server.tcp-user-timeout "$NODE_TIMEOUT" >/dev/null
    log "volume $VOL: node timeout ${NODE_TIMEOUT} s (server.keepalive-time=$ka, server.tcp-user-timeout=$NODE_TIMEOUT)"
  fi
  local kv
  for kv in "${VOLUME_SETS[@]}"; do
    gcli volume set "$VOL" "${kv%%=*}" "${kv#*=}" >/dev/null
    log "volume $VOL: ${kv%%=*}=${kv#*=}"
  done
  if [[ $COHERENT == 1 ]]; then
    # md-cache (stat-prefetch) and quick-read cache attributes / small-file contents for 1 s.
    gcli volume set "$VOL" performance.stat-prefetch off >/dev/null
    gcli volume set "$VOL" performance.quick-read off >/dev/null
    log "volume $VOL: coherent: performance.stat-prefetch=off performance.quick-read=off"
  fi
  if [[ $(gcli volume info "$VOL") != *$'\nStatus: Started'* ]]; then
    gcli volume start "$VOL" >/dev/null
    log "volume $VOL started"
  fi
  wait_brick_online 30
}

wait_brick_online() {  # seconds
  local i
  for ((i = 0; i < $1 * 5; i++)); do
    # --xml: the plain table wraps long brick paths onto two lines.
    if [[ -n $(brick_pid) ]] && [[ $(GCLI_TIMEOUT=10 gcli volume status "$VOL" --xml 2>/dev/null) == *"<status>1</status>"* ]]; then
      return 0
    fi
    sleep 0.2
  done
  die "brick of $VOL not online after $1 s (see $LOG_DIR and gluster volume status)"
}

# ---------------------------------------------------------------- clients
client_pidfile() { echo "$RUN_DIR/client-$1.pid"; }

mount_node() {  # node
  local n=$1 m ns i
  m=$(mnt_of "$n"); ns=$(ns_of "$n")
  mkdir -p "$m"
  # Immutable mount point: with the node's mount gone (node-kill), writes to the path fail
  # (EPERM) instead of landing silently on the local disk underneath.
  is_mounted "$m" || chattr +i "$m" 2>/dev/null || true
  if is_mounted "$m"; then
    if timeout 5 stat -f "$m" &>/dev/null; then log "$n: already mounted at $m"; return; fi
    log "$n: stale mount at $m, unmounting"
    umount -l "$m" || true
  fi
  # The client must run in the node's netns (its TCP connections come from the node's address)
  # but mount into the host mount namespace: nsenter --net only. `ip netns exec` would give it a
  # private mount namespace and the mount would be invisible outside.
  local opts=()
  # The kernel's FUSE attribute / dentry caches (1 s by default) would hide other nodes' changes.
  [[ $COHERENT == 1 ]] && opts=(--attribute-timeout=0 --entry-timeout=0 --negative-timeout=0)
  nsenter --net="/run/netns/$ns" glusterfs --process-name fuse --volfile-server="$SRV_IP" \
    --volfile-id="$VOL" "${opts[@]}" --log-file="$LOG_DIR/client-$n.log" --pid-file="$(client_pidfile "$n")" "$m"
  for ((i = 0; i < 100; i++)); do
    if is_mounted "$m" && timeout 5 stat -f "$m" &>/dev/null; then
      log "$n: mounted $SRV_IP:$VOL at $m (client pid $(cat "$(client_pidfile "$n")" 2>/dev/null), netns $ns)"
      return
    fi
    sleep 0.2
  done
  die "$n: mount at $m did not come up in 20 s (see $LOG_DIR/client-$n.log)"
}

# ---------------------------------------------------------------- commands
cmd_up() {
  local nodes='' coherent=''
  while (($#)); do
    case $1 in
      --nodes) nodes=${2:?}; shift 2 ;;
      --base) BASE=${2:?}; shift 2 ;;
      --ping-timeout) PING_TIMEOUT=${2:?}; shift 2 ;;
      --coherent) coherent=1; shift ;;
      --node-timeout) NODE_TIMEOUT=${2:?}; shift 2 ;;
      --set) [[ ${2:?} == ?*=* ]] || die "--set wants KEY=VALUE"; VOLUME_SETS+=("$2"); shift 2 ;;
      -h | --help) usage; exit 0 ;;
      *) die "up: unknown argument '$1'" ;;
    esac
  done
  [[ -z $nodes || $nodes =~ ^[1-9][0-9]?$ ]] || die "--nodes wants 1..99"
  [[ $PING_TIMEOUT =~ ^[1-9][0-9]*$ ]] || die "--ping-timeout wants seconds >= 1"
  [[ -z $NODE_TIMEOUT || $NODE_TIMEOUT =~ ^[1-9][0-9]*$ ]] || die "--node-timeout wants seconds >= 1"
  local want_base=$BASE
  BASE=; NODES=; COHERENT=; load_state
  if [[ -r $STATE && -n $want_base && ${want_base%/} != "$BASE" ]]; then
    die "a cluster is up with base $BASE; run '$0 down' first"
  fi
  [[ -n $want_base ]] && BASE=${want_base%/}
  [[ $BASE == /* ]] || die "--base must be an absolute path"
  nodes=${nodes:-$((NODES > 0 ? NODES : 2))}
  ((nodes > NODES)) && NODES=$nodes
  [[ -n $coherent ]] && COHERENT=1
  paths
  mkdir -p "$BASE/mnt" "$LOG_DIR" "$RUN_DIR"
  touch "$BASE/$MARKER"
  save_state   # before anything else: `down` can clean up a half-done `up`
  ensure_bridge
  ensure_ns srv
  local k
  for ((k = 1; k <= nodes; k++)); do ensure_ns "n$k"; done
  start_glusterd
  ensure_volume
  for ((k = 1; k <= nodes; k++)); do mount_node "n$k"; done
  log "up: $nodes node(s), base $BASE$([[ $COHERENT == 1 ]] && echo ', coherent')"
}

kill_ns_procs() {  # netns [signal]: every process whose network namespace is that netns
  local ns=$1 sig=${2:-KILL} pids
  ns_exists "$ns" || return 0
  pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
  [[ -n ${pids// /} ]] || return 0
  # shellcheck disable=SC2086
  kill -"$sig" $pids 2>/dev/null || true
  log "$ns: sent SIG$sig to ${pids% }"
}

wait_ns_empty() {  # netns seconds
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    [[ -z $(ip netns pids "$1" 2>/dev/null) ]] && return 0
    sleep 0.1
  done
  return 1
}

harness_netns() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^ucm-(srv|n[0-9]+)$' || true; }

unmount_under() {  # dir: every mount at or below it, deepest first
  local d=$1 m
  while read -r m; do
    [[ -n $m ]] || continue
    if timeout 10 umount "$m" 2>/dev/null; then log "unmounted $m"
    else umount -l "$m" 2>/dev/null && log "lazily unmounted $m" || log "could not unmount $m"; fi
  done < <(awk -v d="$d" '$2 == d || index($2, d "/") == 1 { print $2 }' /proc/mounts | sort -r)
}

live_gluster_daemons() { ps -C glusterd,glusterfsd -o pid=,stat= 2>/dev/null | awk '$2 !~ /^Z/ { printf "%s ", $1 }'; }

restore_sys_paths() {
  [[ -r $PRE ]] || return 0
  local i
  for ((i = 0; i < 50; i++)); do  # ours were just killed: wait until gone (zombies do not count)
    [[ -z $(live_gluster_daemons) ]] && break
    sleep 0.1
  done
  if [[ -n $(live_gluster_daemons) ]]; then
    log "other gluster daemons are running ($(live_gluster_daemons)): leaving ${SYS_PATHS[*]} as they are"
    return 1
  fi
  local f n=0
  # New paths, deepest first: files go, directories go once empty.
  while read -r f; do
    [[ -n $f ]] || continue
    if [[ -d $f && ! -L $f ]]; then rmdir "$f" 2>/dev/null || continue; else rm -f "$f"; fi
    n=$((n + 1))
  done < <(comm -13 "$PRE" <(find "${SYS_PATHS[@]}" -xdev 2>/dev/null | sort) | sort -r)
  ((n == 0)) || log "removed $n path(s) glusterd had added under ${SYS_PATHS[*]}"
}

cmd_down() {
  local keep_logs=
  while (($#)); do
    case $1 in
      --keep-logs) keep_logs=${2:?}; shift 2 ;;
      --base) BASE=${2:?}; shift 2 ;;
      -h | --help) usage; exit 0 ;;
      *) die "down: unknown argument '$1'" ;;
    esac
  done
  load_state; paths
  local ns p
  # 1. Nodes die first (clients and whatever ran in their netns), then their mounts go.
  for ns in $(harness_netns); do [[ $ns == "$SRV_NS" ]] || kill_ns_procs "$ns" KILL; done
  for p in "$RUN_DIR"/client-*.pid; do [[ -e $p ]] && kill -KILL "$(cat "$p")" 2>/dev/null || true; done
  unmount_under "$BASE/mnt"
  # 2. Volume, then the server's processes.
  if [[ -n $(glusterd_pid) ]]; then
    local b; b=$(brick_pid); [[ -n $b ]] && kill -CONT "$b" 2>/dev/null || true
    GCLI_TIMEOUT=30 gcli volume stop "$VOL" force &>/dev/null && log "volume $VOL stopped" || true
    GCLI_TIMEOUT=30 gcli volume delete "$VOL" &>/dev/null && log "volume $VOL deleted" || true
  fi
  for p in "$GD_PID" "$RUN_DIR"/vols/"$VOL"/*.pid; do
    [[ -e $p ]] && kill -TERM "$(cat "$p")" 2>/dev/null || true
  done
  if ns_exists "$SRV_NS"; then
    kill_ns_procs "$SRV_NS" CONT   # a frozen brick would not act on SIGTERM
    kill_ns_procs "$SRV_NS" TERM
    wait_ns_empty "$SRV_NS" 5 || kill_ns_procs "$SRV_NS" KILL
  fi
  # 3. Namespaces and links.
  for ns in $(harness_netns); do
    wait_ns_empty "$ns" 5 || log "$ns: processes still alive: $(ip netns pids "$ns" | tr '\n' ' ')"
    ip netns del "$ns" && log "netns $ns deleted"
  done
  ip link show "$BR" &>/dev/null && ip link del "$BR" && log "bridge $BR deleted"
  for p in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E '^ucmv-' || true); do
    ip link del "$p" 2>/dev/null && log "link $p deleted" || true
  done
  # 4. Files. Never across a mount point, and only a directory this harness made.
  if [[ -n $keep_logs ]]; then
    mkdir -p "$keep_logs"
    cp -a "$LOG_DIR"/. "$keep_logs"/ 2>/dev/null || true
    cp -a /var/log/glusterfs/bricks/*"$(echo "${BRICK#/}" | tr / -)"*.log "$keep_logs"/ 2>/dev/null || true
    log "logs copied to $keep_logs"
  fi
  if [[ -d $BASE ]]; then
    unmount_under "$BASE"
    chattr -i "$BASE"/mnt/* 2>/dev/null || true
    if [[ -e $BASE/$MARKER ]]; then
      rm -rf --one-file-system "$BASE" && log "removed $BASE"
    else
      log "not removing $BASE: no $MARKER in it"
    fi
  fi
  # The list of what existed before stays if it could not be used (a later down retries).
  if restore_sys_paths; then rm -f "$PRE"; fi
  rm -f "$STATE"; rmdir "$STATE_DIR" 2>/dev/null || true
  log "down: done"
}

cmd_exec() {
  load_state; paths
  local n; n=$(norm_node "${1:-}"); shift
  [[ ${1:-} == -- ]] && shift
  (($#)) || die "exec: no command"
  local ns; ns=$(ns_of "$n")
  ns_exists "$ns" || die "exec: no netns $ns (is the cluster up? node killed with --hard?)"
  local env=(UCM_NODE="$n")
  if [[ $n != srv ]]; then
    is_mounted "$(mnt_of "$n")" || log "warning: $n has no mount at $(mnt_of "$n") (node killed?)"
    env+=(UCM_MNT="$(mnt_of "$n")")
  fi
  # Own UTS namespace: gethostname() says ucm-NODE (the store names shards and lock holders after
  # the host name; all nodes would otherwise be "$(hostname)"). Host mount and PID namespaces.
  # shellcheck disable=SC2016
  exec nsenter --net="/run/netns/$ns" unshare --uts -- sh -c 'hostname "$0" && exec "$@"' "$ns" \
    env "${env[@]}" "$@"
}

cmd_mnt() {
  load_state; paths
  local n; n=$(norm_node "${1:-}")
  [[ $n != srv ]] || die "srv has no mount"
  mnt_of "$n"
}

cmd_brick_stop() {
  load_state; paths
  local sig=KILL
  case ${1:-} in --freeze) sig=STOP ;; "") ;; *) die "brick-stop: unknown argument '$1'" ;; esac
  local p; p=$(brick_pid)
  [[ -n $p ]] || die "brick-stop: no brick process"
  kill -"$sig" "$p"
  if [[ $sig == STOP ]]; then
    echo "$p" >"$RUN_DIR/brick.frozen"
    log "brick pid $p frozen (SIGSTOP)"
  else
    rm -f "$RUN_DIR/brick.frozen"
    log "brick pid $p killed (SIGKILL)"
    # Until the zombie is reaped (by PID 1, which can take a second or two here), glusterd
    # takes the brick for running and `volume start force` does nothing.
    local i
    for ((i = 0; i < 100; i++)); do [[ -e /proc/$p ]] || break; sleep 0.1; done
    [[ -e /proc/$p ]] && log "brick pid $p not reaped yet; brick-start will clear its pid file"
  fi
  return 0
}

cmd_brick_start() {
  load_state; paths
  local t0 p n m
  t0=$(date +%s.%N)
  if [[ -e $RUN_DIR/brick.frozen ]]; then
    p=$(cat "$RUN_DIR/brick.frozen"); rm -f "$RUN_DIR/brick.frozen"
    kill -CONT "$p"
    log "brick pid $p resumed (SIGCONT)"
  else
    local f q
    for f in "$RUN_DIR"/vols/"$VOL"/*.pid; do  # a dead brick's pid file would fool glusterd
      [[ -e $f ]] || continue
      q=$(cat "$f" 2>/dev/null || true)
      [[ -n $q && $(cat /proc/"$q"/comm 2>/dev/null) == glusterfsd &&
        $(awk '{print $3}' /proc/"$q"/stat 2>/dev/null) != Z ]] || rm -f "$f"
    done
    gcli volume start "$VOL" force >/dev/null
    log "volume start $VOL force"
  fi
  wait_brick_online 30
  log "brick online (pid $(brick_pid))"
  # The clients reconnect on their own (they retry every few seconds): wait until each reads.
  for ((n = 1; n <= NODES; n++)); do
    m=$(mnt_of "n$n")
    is_mounted "$m" || continue
    local i ok=
    for ((i = 0; i < 300; i++)); do
      if timeout 5 ls "$m" &>/dev/null; then ok=1; break; fi
      sleep 0.1
    done
    if [[ -n $ok ]]; then
      log "n$n: reads again $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s after brick-start"
    else
      log "n$n: still failing 30 s after brick-start"
    fi
  done
}

cmd_node_kill() {
  load_state; paths
  local n hard=
  n=$(norm_node "${1:-}"); shift || true
  [[ $n != srv ]] || die "node-kill srv: use brick-stop"
  case ${1:-} in --hard) hard=1 ;; "") ;; *) die "node-kill: unknown argument '$1'" ;; esac
  local ns m; ns=$(ns_of "$n"); m=$(mnt_of "$n")
  if [[ -n $hard ]]; then
    ip link set "$(veth_of "$n")" down 2>/dev/null && log "$n: link cut"
  fi
  kill_ns_procs "$ns" KILL
  local p; p=$(cat "$(client_pidfile "$n")" 2>/dev/null || true)
  pid_alive "$p" && kill -KILL "$p" 2>/dev/null || true
  wait_ns_empty "$ns" 5 || log "$n: processes still alive in $ns"
  if is_mounted "$m"; then umount -l "$m" && log "$n: lazily unmounted $m"; fi
  if [[ -n $hard ]]; then
    # Deleting the netns drops its sockets without a FIN or RST reaching the server.
    ip netns del "$ns" && log "$n: netns $ns deleted (power loss: the server was not told)"
    local i
    for ((i = 0; i < 50; i++)); do ip link show "$(veth_of "$n")" &>/dev/null || break; sleep 0.1; done
  fi
  log "$n: killed"
}

cmd_node_start() {
  load_state; paths
  local n; n=$(norm_node "${1:-}")
  [[ $n != srv ]] || die "node-start srv: use brick-start"
  ensure_bridge
  ensure_ns "$n"
  mount_node "$n"
  local k=${n#n}; ((k > NODES)) && { NODES=$k; save_state; }
  return 0
}

cmd_net() {  # up|down node
  load_state; paths
  local n; n=$(norm_node "${2:-}")
  ip link set "$(veth_of "$n")" "$1"
  log "$n: link $1"
}

cmd_status() {
  load_state; paths
  echo "== state: base=$BASE nodes=$NODES coherent=$COHERENT ($([[ -r $STATE ]] && echo "$STATE" || echo 'no state file: not up'))"
  echo "== glusterd: $(glusterd_pid || true) brick: $(brick_pid || true)$([[ -e $RUN_DIR/brick.frozen ]] && echo ' (frozen)')"
  if [[ -n $(glusterd_pid) ]]; then
    echo "== volume info"; GCLI_TIMEOUT=10 gcli volume info "$VOL" 2>&1 || true
    echo "== volume status"; GCLI_TIMEOUT=10 gcli volume status "$VOL" 2>&1 || true
  fi
  echo "== mounts"; awk '$3 ~ /glusterfs/ { print $1, $2, $3 }' /proc/mounts
  echo "== namespaces"
  local ns
  for ns in $(harness_netns); do
    echo "$ns: $(ip -n "$ns" -4 -o addr show dev eth0 2>/dev/null | awk '{print $4}') pids:" \
      "$(for p in $(ip netns pids "$ns"); do printf '%s(%s) ' "$p" "$(cat /proc/"$p"/comm 2>/dev/null)"; done)"
  done
  ip -br link show "$BR" 2>/dev/null || echo "no bridge $BR"
}

# ---------------------------------------------------------------- main
main() {
  # A global --base before the command.
  while [[ ${1:-} == --base ]]; do BASE=${2:?}; shift 2; done
  local cmd=${1:-help}; shift || true
  case $cmd in
    help | -h | --help) usage; return 0 ;;
  esac
  [[ $(id -u) == 0 ]] || die "needs root"
  case $cmd in
    up) cmd_up "$@" ;;
    down) cmd_down "$@" ;;
    exec) cmd_exec "$@" ;;
    mnt) cmd_mnt "$@" ;;
    brick-stop) cmd_brick_stop "$@" ;;
    brick-start) cmd_brick_start "$@" ;;
    node-kill) cmd_node_kill "$@" ;;
    node-start) cmd_node_start "$@" ;;
    net-down) cmd_net down "$@" ;;
    net-up) cmd_net up "$@" ;;
    status) cmd_status ;;
    *) usage >&2; die "unknown command '$cmd'" ;;
  esac
}
main "$@"
