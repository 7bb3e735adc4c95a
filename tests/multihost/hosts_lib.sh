# The multi-host harness, sourced by hosts.sh and the fault tests (bash): makes K hosts on this
# machine and runs MPI jobs, or jobs of plain processes over Gloo, across them.
#
# Each host is a network namespace (hostK) whose processes, started by Open MPI through
# rsh_agent.sh, also get a UTS namespace with hostname hostK, a /dev/shm of their own and a
# TMPDIR of their own (the file system stays the machine's, as a cluster's shared one). A head namespace holds the bridge the hosts' veth pairs join and runs mpirun, so nothing
# is added to the machine's own network. Addresses come from the documentation range only: the
# bridge 192.0.2.1, host k 192.0.2.(10+k). Each link is rate-limited both ways by a tbf qdisc.
# Within a host ranks talk through shared memory (vader), between hosts through TCP only.
#
#   hosts_up COUNT SLOTS RATE_GBIT   makes the hosts (RATE_GBIT 0: no limit), first removing what
#                                    runs whose script is gone left behind; exits 77 with the
#                                    reason when this machine cannot make namespaces
#   hosts_mpirun ARGS...             mpirun ARGS over the hosts, SLOTS ranks per host by default;
#                                    ended after HOSTS_TIMEOUT seconds where set (exit code 124)
#   hosts_gloo ARGS...               ARGS as SLOTS plain processes per host, joined over Gloo
#                                    through a redis-server on the head
#   hosts_link K up|down             sets hostK's link up or down
#   hosts_kill K                     kills every process of hostK (SIGKILL)
#   hosts_signal K SIGNAL            sends SIGNAL (STOP, CONT, ...) to every process of hostK
#   hosts_leftovers                  lists what jobs left on the hosts (shared memory, TMPDIR
#                                    files, processes, TCP sockets); empty when nothing
#   hosts_down                       removes everything; also run on exit, and by a watcher process
#                                    when the script is killed outright (SIGKILL)

hosts_lib_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# Prints the reason and exits 77, which ctest reads as a skip (SKIP_RETURN_CODE).
hosts_skip() {
  echo "SKIP: $*" >&2
  exit 77
}

# The namespaces of the harness run ID, head first.
hosts_namespaces() {
  ip netns list | awk -v prefix="$1-" 'index($1, prefix) == 1 { print $1 }' | sort
}

# Kills every process in the namespaces of run ID, then removes them and the run's directories.
# Idempotent; safe to run from the watcher and the exit trap alike.
hosts_teardown() {
  local id=$1 ns pids spaces
  spaces=$(hosts_namespaces "$id")
  for _ in $(seq 50); do
    pids=$(for ns in $spaces; do ip netns pids "$ns" 2>/dev/null; done)
    [ -n "$pids" ] || break
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null
    sleep 0.1
  done
  for ns in $spaces; do ip netns del "$ns" 2>/dev/null; done
  rm -rf "/dev/shm/$id" "/tmp/$id"
}

# The start time of process PID (field 22 of /proc/PID/stat, in clock ticks since boot), which
# tells a process from a later one given the same PID; empty when there is no such process.
hosts_start_time() {
  local stat fields
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  # The fields after the command name, which may hold spaces and ends at the last ')'.
  read -ra fields <<<"${stat##*) }"
  echo "${fields[19]}"
}

# The runs whose namespaces or directories are on this machine: distribute-hosts-PID-START-N, as
# hosts_up names them, and distribute-hosts-PID-N of earlier versions of this file.
hosts_runs() {
  {
    ip netns list | awk '{ print $1 }' | sed -nE 's/^(distribute-hosts-[0-9-]+)-(head|host[0-9]+)$/\1/p'
    for dir in /dev/shm/distribute-hosts-* /tmp/distribute-hosts-*; do
      [ ! -e "$dir" ] || echo "${dir##*/}"
    done
  } | sort -u
}

# Whether the script that made run ID has ended (then nothing removes what the run left: its
# watcher was killed with it), and not merely its PID taken by another process since. A run of an
# earlier version, whose ID lacks the start time, counts as ended only once its PID is unused.
hosts_run_ended() {
  local pid start rest
  IFS=- read -r pid start rest <<<"${1#distribute-hosts-}"
  [ -n "$rest" ] || { [ ! -e "/proc/$pid" ]; return; }
  [ "$(hosts_start_time "$pid")" != "$start" ]
}

# Removes the namespaces (and with them their veth links and processes) and the directories of
# every run whose script has ended: an interrupted run leaves them when its watcher dies too.
hosts_sweep() {
  local id
  for id in $(hosts_runs); do
    if hosts_run_ended "$id"; then
      echo "hosts_lib: removing what the ended run $id left" >&2
      hosts_teardown "$id"
    fi
  done
}

hosts_down() {
  [ -n "${HOSTS_ID:-}" ] || return 0
  hosts_teardown "$HOSTS_ID"
  if [ -n "$(hosts_namespaces "$HOSTS_ID")" ] || [ -e "/dev/shm/$HOSTS_ID" ] || [ -e "/tmp/$HOSTS_ID" ]; then
    echo "hosts_lib: could not remove everything of $HOSTS_ID: $(hosts_namespaces "$HOSTS_ID")" >&2
    return 1
  fi
  HOSTS_ID=
}

hosts_up() {
  local count=$1 slots=$2 rate=$3 tool err k head ns
  [ "$(id -u)" -eq 0 ] || hosts_skip "making network namespaces needs root (this is uid $(id -u))"
  for tool in ip tc unshare mount setsid timeout; do
    command -v "$tool" >/dev/null || hosts_skip "$tool is not installed (Debian: iproute2, util-linux, coreutils)"
  done
  hosts_sweep
  HOSTS_ID=distribute-hosts-$$-$(hosts_start_time $$)-$RANDOM
  HOSTS_COUNT=$count
  HOSTS_SLOTS=$slots
  export DISTRIBUTE_HOSTS_NETNS_PREFIX=$HOSTS_ID-
  export DISTRIBUTE_HOSTS_DIR=/dev/shm/$HOSTS_ID DISTRIBUTE_HOSTS_TMP=/tmp/$HOSTS_ID
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  head=${HOSTS_ID}-head
  trap 'hosts_down || exit 1' EXIT
  trap 'exit 129' HUP
  trap 'exit 130' INT
  trap 'exit 143' TERM
  if ! err=$(ip netns add "$head" 2>&1); then
    HOSTS_ID=
    hosts_skip "cannot make a network namespace (needs CAP_SYS_ADMIN and CAP_NET_ADMIN): $err"
  fi
  # Removes everything once this shell is gone, even when it was killed with SIGKILL (ctest's
  # timeout); in a session of its own, with no terminal or pipe of the test's held open.
  setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done; source "$2"; hosts_teardown "$3"' \
    hosts_watcher $$ "$hosts_lib_dir/hosts_lib.sh" "$HOSTS_ID" </dev/null >/dev/null 2>&1 &
  mkdir -p "$DISTRIBUTE_HOSTS_DIR" "$DISTRIBUTE_HOSTS_TMP/head"
  ip -n "$head" link set lo up
  ip -n "$head" link add br0 type bridge
  ip -n "$head" addr add 192.0.2.1/24 dev br0
  ip -n "$head" link set br0 up
  : >"$DISTRIBUTE_HOSTS_DIR/hostfile"
  for ((k = 0; k < count; ++k)); do
    ns=${HOSTS_ID}-host$k
    ip netns add "$ns"
    ip -n "$head" link add "port$k" type veth peer name eth0 netns "$ns"
    ip -n "$head" link set "port$k" master br0
    ip -n "$head" link set "port$k" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "192.0.2.$((10 + k))/24" dev eth0
    ip -n "$ns" link set eth0 up
    if ((rate > 0)); then
      hosts_limit "$ns" eth0 "$rate"
      hosts_limit "$head" "port$k" "$rate"
    fi
    mkdir -p "$DISTRIBUTE_HOSTS_DIR/host$k/shm" "$DISTRIBUTE_HOSTS_TMP/host$k"
    echo "host$k slots=$slots" >>"$DISTRIBUTE_HOSTS_DIR/hostfile"
  done
}

# A token bucket of RATE Gbit/s on the egress of DEV in namespace NS. Its bucket holds 1 ms of
# traffic, and at least 128 KiB: veth hands over segments of up to 64 KiB at once.
hosts_limit() {
  local ns=$1 dev=$2 rate=$3 burst
  burst=$((rate * 1000000000 / 8 / 1000))
  ((burst >= 131072)) || burst=131072
  tc -n "$ns" qdisc add dev "$dev" root tbf rate "${rate}gbit" burst "$burst" latency 20ms
}

hosts_mpirun() {
  local forward=() var
  for var in TSAN_OPTIONS ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS; do
    [ -z "${!var:-}" ] || forward+=(-x "$var")
  done
  TMPDIR=$DISTRIBUTE_HOSTS_TMP/head timeout -k 5 "${HOSTS_TIMEOUT:-0}" \
    ip netns exec "${HOSTS_ID}-head" unshare --uts sh -c 'hostname head && exec "$@"' hosts_mpirun mpirun --hostfile "$DISTRIBUTE_HOSTS_DIR/hostfile" --bind-to none \
    --mca plm_rsh_agent "$hosts_lib_dir/rsh_agent.sh" --mca plm_rsh_no_tree_spawn 1 \
    --mca pml ob1 --mca btl tcp,self,vader --mca btl_tcp_if_include 192.0.2.0/24 \
    --mca oob_tcp_if_include 192.0.2.0/24 "${forward[@]}" "$@"
}

# ARGS as a job over Gloo instead: SLOTS plain processes per host, each started as rsh_agent.sh
# starts mpirun's daemons (worker r on host r / SLOTS), told its rank in RANK and WORLD_SIZE, meeting
# at a redis-server the head runs at 192.0.2.1:6379, and accepting its peers on its host's eth0
# (GLOO_SOCKET_IFNAME). Returns the first failing worker's status, once every worker has ended (and
# then stops the server); each worker is ended after HOSTS_TIMEOUT seconds where set (exit code 124).
hosts_gloo() {
  local log=$DISTRIBUTE_HOSTS_TMP/head/redis.log workers=$((HOSTS_COUNT * HOSTS_SLOTS)) rank=0 status=0
  local forward="" var k s pid code pids=() redis
  ip netns exec "${HOSTS_ID}-head" redis-server --bind 192.0.2.1 --port 6379 --protected-mode no --save '' --appendonly no \
    --dir "$DISTRIBUTE_HOSTS_TMP/head" >"$log" 2>&1 &
  redis=$!
  for _ in $(seq 50); do
    if grep -q "Ready to accept connections" "$log"; then break; fi
    sleep 0.1
  done
  grep -q "Ready to accept connections" "$log" || { echo "hosts_lib: redis-server did not start:" >&2; cat "$log" >&2; return 1; }
  for var in TSAN_OPTIONS ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS; do
    [ -z "${!var:-}" ] || forward+=" $var='${!var}'"
  done
  for ((k = 0; k < HOSTS_COUNT; ++k)); do
    for ((s = 0; s < HOSTS_SLOTS; ++s, ++rank)); do
      timeout -k 5 "${HOSTS_TIMEOUT:-0}" "$hosts_lib_dir/rsh_agent.sh" "host$k" env RANK=$rank WORLD_SIZE=$workers \
        LOCAL_RANK=$s LOCAL_WORLD_SIZE="$HOSTS_SLOTS" DISTRIBUTE_RENDEZVOUS=redis://192.0.2.1:6379 \
        GLOO_SOCKET_IFNAME=eth0 "$forward" "$@" &
      pids+=($!)
    done
  done
  for pid in "${pids[@]}"; do
    code=0
    wait "$pid" || code=$?
    ((status != 0)) || status=$code
  done
  # The store was the job's: the next job on these hosts starts its own.
  kill "$redis" 2>/dev/null || true  # gone already when a test killed it
  wait "$redis" 2>/dev/null || true
  return "$status"
}

hosts_link() {
  ip -n "${HOSTS_ID}-host$1" link set eth0 "$2"
}

hosts_kill() {
  hosts_signal "$1" KILL
}

hosts_signal() {
  local pids
  pids=$(ip netns pids "${HOSTS_ID}-host$1")
  # shellcheck disable=SC2086
  [ -z "$pids" ] || kill -"$2" $pids
}

hosts_leftovers() {
  local k ns pids
  for ((k = 0; k < HOSTS_COUNT; ++k)); do
    ns=${HOSTS_ID}-host$k
    find "$DISTRIBUTE_HOSTS_DIR/host$k/shm" "$DISTRIBUTE_HOSTS_TMP/host$k" -mindepth 1 -maxdepth 1 \
      -printf "host$k: %p\n"
    pids=$(ip netns pids "$ns")
    [ -z "$pids" ] || echo "host$k: processes $(echo "$pids" | tr '\n' ' ')"
    ip netns exec "$ns" ss -Htan exclude time-wait | sed "s/^/host$k: socket /"
  done
}
