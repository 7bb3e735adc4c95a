# Sourced by the elastic tests (tests/elastic_test.sh, tests/multihost/elastic.sh): checks of what
# tests/elastic_job prints. Each calls the caller's `fail MESSAGE` when its check fails.

# recovered_within LOG RANK SECONDS: worker RANK's recovery after losing workers (from its last
# commit before the change to its first after) took less than SECONDS.
recovered_within() {
  local seconds
  seconds=$(sed -n "s/^rank $2: recovered in \([0-9.]*\) s$/\1/p" "$1" | head -1)
  [ -n "$seconds" ] || fail "worker $2 reported no recovery"
  awk -v s="$seconds" -v b="$3" 'BEGIN { exit !(s < b) }' || fail "worker $2 recovered in $seconds s, not within $3 s"
  echo "worker $2 recovered in $seconds s"
}

# joined_within LOG RANK SECONDS: newcomer RANK was let in less than SECONDS after it started.
joined_within() {
  local seconds
  seconds=$(sed -n "s/^rank $2: joined in \([0-9.]*\) s$/\1/p" "$1" | head -1)
  [ -n "$seconds" ] || fail "worker $2 reported no joining"
  awk -v s="$seconds" -v b="$3" 'BEGIN { exit !(s < b) }' || fail "worker $2 took $seconds s to join, not $3 s"
  echo "worker $2 joined in $seconds s"
}
