#!/usr/bin/env bash
# Runs "$@" with a Redis for the tests: the one at CORRGRPO_TEST_REDIS_URL (default 127.0.0.1:6379) when it
# answers, else a throwaway redis-server on a free loopback port (stopped afterwards), else says how to get one.
set -euo pipefail
url=${CORRGRPO_TEST_REDIS_URL:-redis://127.0.0.1:6379/0}
hostport=${url#redis://}
hostport=${hostport%%/*}
host=${hostport%:*}
port=${hostport##*:}

answers() {  # PING over bash's /dev/tcp: no redis-cli needed
  local reply
  { exec 3<>"/dev/tcp/$1/$2"; } 2>/dev/null || return 1
  printf 'PING\r\n' >&3
  read -r -t 2 reply <&3 || true
  exec 3>&-
  [[ $reply == +PONG* ]]
}

if answers "$host" "$port"; then
  exec "$@"
fi
if ! command -v redis-server >/dev/null; then
  cat >&2 <<MSG
No Redis answers at $url, and redis-server is not installed.
Install it (Debian/Ubuntu: sudo apt-get install redis-server; macOS: brew install redis) and rerun,
or point CORRGRPO_TEST_REDIS_URL at a Redis you may write to.
MSG
  exit 1
fi
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" --daemonize yes \
  --pidfile "$dir/redis.pid" --logfile "$dir/redis.log"
trap 'kill "$(cat "$dir/redis.pid")" 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 50); do answers 127.0.0.1 "$port" && break; sleep 0.1; done
answers 127.0.0.1 "$port" || { echo "the throwaway redis-server did not start (log: $dir/redis.log)" >&2; exit 1; }
echo "No Redis at $url: using a throwaway redis-server on 127.0.0.1:$port for this run" >&2
export CORRGRPO_TEST_REDIS_URL="redis://127.0.0.1:$port/0"
"$@"
