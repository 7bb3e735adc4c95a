#!/bin/bash
# Starts a multi-worker job as plain processes, the way a shell loop or a launcher without MPI
# would: worker r of W gets RANK=r, WORLD_SIZE=W, LOCAL_RANK=r, LOCAL_WORLD_SIZE=W and
# DISTRIBUTE_RENDEZVOUS, the address of a rendezvous store this script makes for the job (a
# directory, or with --redis a redis-server of its own on a free loopback port), removed at exit.
# Exits with the first failing worker's status (0 when every worker succeeded); on SIGTERM or
# SIGINT (ctest's timeout) it ends the workers too.
#
#   tests/launch_workers.sh -n W [--redis] -- program [arguments...]
set -u

workers=""
redis=0
while [ $# -gt 0 ]; do
  case "$1" in
    -n) workers="$2"; shift 2 ;;
    --redis) redis=1; shift ;;
    --) shift; break ;;
    *) echo "launch_workers.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ -z "$workers" ] || [ $# -eq 0 ]; then
  echo "usage: launch_workers.sh -n WORKERS [--redis] -- PROGRAM [ARGUMENTS...]" >&2
  exit 2
fi

scratch=$(mktemp -d "${TMPDIR:-/tmp}/launch_workers.XXXXXX")
pids=()
redis_pid=""
cleanup() {
  for pid in "${pids[@]}" $redis_pid; do kill -9 "$pid" 2>/dev/null; done
  rm -rf "$scratch"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

if [ "$redis" = 1 ]; then
  # A free port: redis-server fails to start on a taken one, so try a few.
  for attempt in 1 2 3 4 5 6 7 8; do
    port=$((20000 + RANDOM % 20000))
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
      --dir "$scratch" > "$scratch/redis.log" 2>&1 &
    redis_pid=$!
    for _ in $(seq 50); do
      if grep -q "Ready to accept connections" "$scratch/redis.log"; then break 2; fi
      kill -0 "$redis_pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 "$redis_pid" 2>/dev/null
    redis_pid=""
  done
  if [ -z "$redis_pid" ]; then
    echo "launch_workers.sh: could not start redis-server:" >&2
    cat "$scratch/redis.log" >&2
    exit 1
  fi
  rendezvous="redis://127.0.0.1:$port"
else
  mkdir "$scratch/store"
  rendezvous="file://$scratch/store"
fi

for ((r = 0; r < workers; r++)); do
  RANK=$r WORLD_SIZE=$workers LOCAL_RANK=$r LOCAL_WORLD_SIZE=$workers DISTRIBUTE_RENDEZVOUS=$rendezvous "$@" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
  wait "$pid"
  code=$?
  if [ "$status" = 0 ] && [ "$code" != 0 ]; then status=$code; fi
done
pids=()
exit $status
