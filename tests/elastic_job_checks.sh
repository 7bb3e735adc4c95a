# Sourced by the elastic tests (tests/elastic_test.sh, tests/multihost/elastic.sh): checks of what
# tests/elastic_job prints. Each calls the caller's `fail MESSAGE` when its check fails.

# took_less LOG RANK WHAT SECONDS: worker RANK printed "rank RANK: WHAT in X s" with X < SECONDS.
took_less() {
  local seconds
  seconds=$(sed -n "s/^rank $2: $3 in \([0-9.]*\) s$/\1/p" "$1" | head -1)
  [ -n "$seconds" ] || fail "worker $2 did not say it $3"
  awk -v s="$seconds" -v b="$4" 'BEGIN { exit !(s < b) }' || fail "worker $2 $3 in $seconds s, not within $4 s"
  echo "worker $2 $3 in $seconds s"
}

# recovered_within LOG RANK SECONDS: worker RANK's recovery after losing workers (from its last
# commit before the change to its first after it) took less than SECONDS.
recovered_within() { took_less "$1" "$2" recovered "$3"; }

# joined_within LOG RANK SECONDS: newcomer RANK was let in less than SECONDS after it started.
joined_within() { took_less "$1" "$2" joined "$3"; }
