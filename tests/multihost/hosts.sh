#!/usr/bin/env bash
# Runs an MPI job across several hosts made on this machine (network namespaces joined by a
# bridge, see hosts_lib.sh), then removes them: a cluster layout on one machine, for ctest's
# multihost label and by hand. Needs root; exits 77 (a skip) with the reason where namespaces
# cannot be made.
#
#   tests/multihost/hosts.sh [--hosts K] [--slots S] [--rate GBIT] [--timeout SEC] [--gloo] -- MPIRUN_ARGS...
#
#   --hosts K      hosts host0 .. host(K-1) (default 2)
#   --slots S      ranks per host (default 1); mpirun starts K x S ranks unless MPIRUN_ARGS say -np
#   --rate GBIT    each link's rate in Gbit/s, both ways (default 10; 0: no limit)
#   --timeout SEC  ends the job after SEC seconds (default 0: none); it then exits 124
#   --gloo         no mpirun: starts S plain processes per host, which meet over Gloo at a
#                  redis-server on the head (RANK, WORLD_SIZE, DISTRIBUTE_RENDEZVOUS); the
#                  arguments are then the program and its own
#
# Example, 2 hosts x 2 workers x 1 replica:
#   tests/multihost/hosts.sh --hosts 2 --slots 2 -- build/default/tests/multi_worker_test --local_replicas=1
set -euo pipefail
source "$(dirname "$0")/hosts_lib.sh"

count=2 slots=1 rate=10 limit=0 launch=hosts_mpirun
while (($#)); do
  case $1 in
    --hosts) count=$2; shift 2 ;;
    --slots) slots=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --timeout) limit=$2; shift 2 ;;
    --gloo) launch=hosts_gloo; shift ;;
    --) shift; break ;;
    *) echo "hosts.sh: unknown option '$1' (see the comment at the top of $0)" >&2; exit 2 ;;
  esac
done
(($#)) || { echo "hosts.sh: nothing to run: give mpirun's arguments after --" >&2; exit 2; }

hosts_up "$count" "$slots" "$rate"
HOSTS_TIMEOUT=$limit
echo "hosts.sh: $count hosts x $slots slots, links at $rate Gbit/s (0: no limit)"
# In the background, so that a signal to this script ends the wait at once and its trap removes
# the hosts (and with them the job).
"$launch" "$@" &
wait $!
