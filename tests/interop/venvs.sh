#!/usr/bin/env bash
# Side environments for `make interop`: the other RL stacks' own code, from PyPI, outside .venv.
#   .venv-verl      a venv with verl 0.9.1 (its transformers pin clashes with TRL's) and the TransferQueue its default
#                   (v1) trainer imports, corrgrpo-proto, corrgrpo-adapters
#                   and the core of corrgrpo-trainer (torch only: the estimator's advantages), as a verl user would.
#                   Each venv also gets corrgrpo-testing (the tests' service launcher; httpx only).
#   .venv-openrlhf  OpenRLHF 0.11.0 and 0.11.2 side by side (`pip --target`, no dependencies) plus the two
#                   modules `openrlhf.utils` imports that .venv lacks; the tests import them from .venv.
#   .venv-verifiers, .venv-openenv, .venv-nemo-gym   verifiers 0.4.0, openenv 0.10, nemo-gym 0.4.0
#                   (Python >= 3.12), each with corrgrpo-proto and corrgrpo-adapters: their pins clash with each
#                   other (mcp 2 for verifiers, mcp < 2 for openenv) and with .venv's.
# The third-party part of each is built once per machine into a cache, keyed by its build command, the pins,
# the parts' pyproject.toml and the Python version: CORRGRPO_VENV_CACHE, default ~/.cache/corrgrpo/venvs (clear it
# with rm -rf; the two newest entries per venv are kept). A clone gets a hard-linked copy (seconds) and the
# project's parts installed editable from itself, so they are never stale. A build or copy prints its time.
# Arguments: the venvs to build (verl verifiers openenv nemo-gym openrlhf), all of them without any.
set -euo pipefail
cd "$(dirname "$0")/../.."
wanted=" $* "
want() { [ "$wanted" = "  " ] || [[ $wanted == *" $1 "* ]]; }
cache=${CORRGRPO_VENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/corrgrpo/venvs}
OPENRLHF_VERSIONS=(0.11.0 0.11.2)

# key_of NAME PYTHON TEXT FILES...: the cache entry's name: NAME and a hash of what decides its contents (the
# Python, TEXT: the builder's code and arguments, FILES: pins and pyproject.toml), so an edit elsewhere keeps it.
key_of() {
  local name=$1 python=$2 text=$3
  shift 3
  echo "$name-$({ "$python" -VV; echo "$text"; cat "$@"; } | sha256sum | cut -c1-16)"
}

# from_cache DIR KEY BUILDER ARGS...: DIR as a copy of the cache entry KEY, which `BUILDER ENTRY ARGS...` builds
# when it is missing. One lock per venv name: a build, a copy and the pruning of old entries never overlap.
from_cache() {
  local dir=$1 key=$2 start=$SECONDS lock
  shift 2
  local entry=$cache/$key name=${dir#.venv-}
  mkdir -p "$cache"
  exec {lock}>"$cache/$name.lock"
  flock "$lock"
  if [ ! -f "$entry/.complete" ]; then
    rm -rf "$entry"
    "$1" "$entry" "${@:2}"
    touch "$entry/.complete"
    echo "built $entry in $((SECONDS - start)) s"
  fi
  touch "$entry"
  rm -rf "$dir"
  # Hard links share the cache's files; pip and Python replace files rather than write into them.
  cp -al "$entry" "$dir" 2>/dev/null || { rm -rf "$dir" && cp -a "$entry" "$dir"; }
  # Old entries: the unfinished (their builder died: the lock is ours) and all but the two newest.
  find "$cache" -mindepth 1 -maxdepth 1 -type d -name "$name-*" ! -exec test -f {}/.complete \; -exec rm -rf {} +
  # shellcheck disable=SC2012  # the entries' names are ours: NAME-HEX
  ls -1dt "$cache/$name"-* | tail -n +3 | xargs -r rm -rf
  flock -u "$lock"
  exec {lock}>&-
  # A venv names its own path in its scripts (shebangs, activate): sed -i writes new files, the cache keeps its own.
  { grep -lIsF -- "$entry" "$dir"/bin/* "$dir/pyvenv.cfg" || true; } | xargs -r sed -i "s|$entry|$PWD/$dir|g"
  echo "$dir from $entry in $((SECONDS - start)) s"
}

# build_venv ENTRY PYTHON PINS PARTS PACKAGES...: a venv with PACKAGES and the PARTS' dependencies under the pins
# PINS, without the parts themselves (each clone installs its own), and their build backend (build-system.requires),
# so that a clone's editable installs need no isolated build environment.
build_venv() {
  local entry=$1 python=$2 pins=$3 parts=$4
  shift 4
  "$python" -m venv "$entry"
  # shellcheck disable=SC2046  # one -e per part
  "$entry/bin/pip" install -q -c "$pins" "$@" "setuptools>=68" $(printf -- '-e %s ' $parts)
  "$entry/bin/pip" list --format=freeze | sed -n 's/^\(corrgrpo-[a-z-]*\)==.*/\1/p' | xargs -r "$entry/bin/pip" uninstall -q -y
}

# side_venv DIR PYTHON PINS PARTS PACKAGES...: DIR with PACKAGES (cached) and this clone's PARTS (editable).
side_venv() {
  local dir=$1 python=$2 pins=$3 parts=$4 key
  shift 4
  # shellcheck disable=SC2046  # one pyproject.toml per part
  key=$(key_of "${dir#.venv-}" "$python" "$(declare -f build_venv) $parts $*" "$pins" $(printf '%s/pyproject.toml ' $parts))
  [ -f "$dir/.built-$key" ] && return
  from_cache "$dir" "$key" build_venv "$python" "$pins" "$parts" "$@"
  # shellcheck disable=SC2046
  "$dir/bin/pip" install -q --no-deps --no-build-isolation $(printf -- '-e %s ' $parts)
  touch "$dir/.built-$key"
}

# The first Python >= 3.12 here (NeMo Gym requires it): on PATH, else a pyenv version.
python312() {
  local candidate
  for candidate in python3 python3.12 python3.13 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[2-9]*/bin/python3; do
    if "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
      echo "$candidate"
      return
    fi
  done
  echo "NeMo Gym needs Python >= 3.12 and none was found (pyenv install 3.12, or apt-get install python3.12)" >&2
  return 1
}

if want verl; then
  side_venv .venv-verl python3 tests/interop/verl-constraints.txt "proto trainer adapters testing" \
    verl transferqueue cachetools fastapi uvicorn pytest pytest-asyncio
fi
if want verifiers; then
  side_venv .venv-verifiers python3 tests/interop/verifiers-constraints.txt "proto adapters testing" \
    verifiers pytest pytest-asyncio
fi
if want openenv; then
  side_venv .venv-openenv python3 tests/interop/openenv-constraints.txt "proto adapters testing" openenv pytest pytest-asyncio
fi
if want nemo-gym; then
  side_venv .venv-nemo-gym "$(python312)" tests/interop/nemo-gym-constraints.txt "proto adapters testing" \
    nemo-gym pytest pytest-asyncio
fi

build_openrlhf() {
  local entry=$1 version
  for version in "${OPENRLHF_VERSIONS[@]}"; do
    .venv/bin/pip install -q --no-deps --target "$entry/$version" "openrlhf==$version"
  done
  .venv/bin/pip install -q --target "$entry/deps" aiohttp==3.14.5 pylatexenc==2.11
}
openrlhf_key=$(key_of openrlhf .venv/bin/python "$(declare -f build_openrlhf) ${OPENRLHF_VERSIONS[*]}")
if want openrlhf && [ ! -f ".venv-openrlhf/.built-$openrlhf_key" ]; then
  from_cache .venv-openrlhf "$openrlhf_key" build_openrlhf
  touch ".venv-openrlhf/.built-$openrlhf_key"
fi
