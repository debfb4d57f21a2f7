#!/usr/bin/env bash
# A throwaway Docker engine for `make compose-test`, used only when no engine answers.
#   source deploy/dockerd.sh && dockerd_up     # exports DOCKER_HOST; starts dockerd if needed
#   dockerd_down                               # stops it again (only if dockerd_up started it)
# Its data root persists (CORRGRPO_DOCKERD_ROOT, default /var/lib/corrgrpo-dockerd), so images and
# build cache survive between runs; the daemon, its sockets and its containerd do not. Needs root.
dockerd_root=${CORRGRPO_DOCKERD_ROOT:-/var/lib/corrgrpo-dockerd}
dockerd_run=/run/corrgrpo-dockerd
dockerd_started=0

dockerd_up() {
  if docker info >/dev/null 2>&1; then return 0; fi
  export DOCKER_HOST=unix://$dockerd_run/docker.sock
  if docker info >/dev/null 2>&1; then return 0; fi
  command -v dockerd >/dev/null || { echo "no Docker engine answers and dockerd is not installed" >&2; return 1; }
  mkdir -p "$dockerd_root" "$dockerd_run"
  dockerd --data-root "$dockerd_root" --exec-root "$dockerd_run/exec" -H "$DOCKER_HOST" \
    --pidfile "$dockerd_run/dockerd.pid" >"$dockerd_run/dockerd.log" 2>&1 &
  dockerd_started=1
  for _ in $(seq 120); do
    docker info >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  echo "dockerd did not answer within 60 s:" >&2
  tail -20 "$dockerd_run/dockerd.log" >&2
  return 1
}

dockerd_down() {
  [ "$dockerd_started" = 1 ] && [ -s "$dockerd_run/dockerd.pid" ] || return 0
  local pid
  pid=$(cat "$dockerd_run/dockerd.pid")
  # Our private data root: drop the images that rebuilds left untagged (the build cache stays).
  docker image prune -f >/dev/null 2>&1 || true
  kill "$pid" 2>/dev/null || return 0
  for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.5; done
  echo "dockerd $pid did not stop within 30 s" >&2
}
