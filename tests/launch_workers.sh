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
. "$(dirname "$0")/job_processes.sh"
trap 'kill_job; rm -rf "$scratch"' EXIT
trap 'exit 143' TERM INT

if [ "$redis" = 1 ]; then
  start_redis "$scratch" || exit 1
  port=$redis_port
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
