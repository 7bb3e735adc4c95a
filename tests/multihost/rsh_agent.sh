#!/bin/sh
# Open MPI's rsh agent for the multi-host harness (hosts_lib.sh): mpirun calls it as it would call
# ssh, `rsh_agent.sh HOST COMMAND...`, to start its daemon (orted) on HOST. Instead of logging in,
# it enters HOST's network namespace, gives it a UTS namespace of its own whose hostname is HOST,
# mounts HOST's own /dev/shm, and runs COMMAND there in a clean environment, as a login shell
# would, whose TMPDIR is HOST's own (directories that last as long as the harness, as a machine's
# outlive its jobs). The harness says where those live in DISTRIBUTE_HOSTS_NETNS_PREFIX,
# DISTRIBUTE_HOSTS_DIR and DISTRIBUTE_HOSTS_TMP.
set -eu
host=$1
shift
case $host in
  host[0-9]*) ;;
  *) echo "rsh_agent.sh: unknown host '$host' (the harness makes host0, host1, ...)" >&2; exit 255 ;;
esac
# `ip netns exec` runs its command in a mount namespace of its own, so the mounts stay there.
exec ip netns exec "${DISTRIBUTE_HOSTS_NETNS_PREFIX}$host" unshare --uts \
  env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME="${HOME:-/}" \
  TMPDIR="$DISTRIBUTE_HOSTS_TMP/$host" /bin/sh -c 'hostname "$1" && mount --bind "$2" /dev/shm && shift 2 && eval "$*"' \
  rsh_agent "$host" "$DISTRIBUTE_HOSTS_DIR/$host/shm" "$@"
