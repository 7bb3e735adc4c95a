# Sourced by the tests' launch scripts, whose jobs' processes it keeps: `pids` (the workers, which
# the caller adds) and `redis_pid`, all killed by kill_job, which runs at the caller's exit.
# start_redis DIR starts a redis-server of the caller's own on a free loopback port, its log and
# files in DIR, and sets redis_pid and redis_port (returns 1, with the log on stderr, when none
# would start).
pids=()
redis_pid=""
kill_job() {
  for pid in "${pids[@]}" $redis_pid; do kill -9 "$pid" 2>/dev/null; done
  wait 2>/dev/null
}
trap kill_job EXIT

start_redis() {
  local dir=$1
  redis_pid=""
  # A free port: redis-server fails to start on a taken one, so try a few.
  for attempt in 1 2 3 4 5 6 7 8; do
    redis_port=$((20000 + RANDOM % 20000))
    redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
      --dir "$dir" > "$dir/redis.log" 2>&1 &
    redis_pid=$!
    for _ in $(seq 50); do
      if grep -q "Ready to accept connections" "$dir/redis.log"; then return 0; fi
      kill -0 "$redis_pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 "$redis_pid" 2>/dev/null
    redis_pid=""
  done
  echo "could not start redis-server:" >&2
  cat "$dir/redis.log" >&2
  return 1
}
