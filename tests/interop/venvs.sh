#!/usr/bin/env bash
# Side environments for `make interop`: the other RL stacks' own code, from PyPI, outside .venv.
#   .venv-verl      a venv with verl 0.9.1 (its transformers pin clashes with TRL's), corrgrpo-proto and the
#                   core of corrgrpo-trainer (torch only: the verl plugin), as a verl user would install them.
#   .venv-openrlhf  OpenRLHF 0.11.0 and 0.11.2 side by side (`pip --target`, no dependencies) plus the two
#                   modules `openrlhf.utils` imports that .venv lacks; the tests import them from .venv.
#   .venv-verifiers, .venv-openenv, .venv-nemo-gym   verifiers 0.3.1, openenv-core 0.3.0, nemo-gym 0.4.0 (Python
#                   >= 3.12), each with corrgrpo-proto and corrgrpo-adapters: their pins clash with each other
#                   (mcp < 2 for verifiers, mcp 2 for openenv) and with .venv's.
# Idempotent: each is rebuilt only when this script or its pins change (stamp file). A build prints its time.
set -euo pipefail
cd "$(dirname "$0")/../.."
OPENRLHF_VERSIONS=(0.11.0 0.11.2)
stamp_of() { cat tests/interop/venvs.sh "$@" | sha256sum | cut -c1-16; }

# side_venv DIR PYTHON PINS PIP_ARGS...: a venv with PIP_ARGS installed under the pins PINS.
side_venv() {
  local dir=$1 python=$2 pins=$3 start=$SECONDS
  shift 3
  local stamp="$dir/.built-$(stamp_of "$pins")"
  [ -f "$stamp" ] && return
  rm -rf "$dir"
  "$python" -m venv "$dir"
  "$dir/bin/pip" install -q -c "$pins" "$@"
  touch "$stamp"
  echo "built $dir in $((SECONDS - start)) s"
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

side_venv .venv-verl python3 tests/interop/verl-constraints.txt \
  verl cachetools fastapi uvicorn pytest pytest-asyncio -e proto -e trainer -e testing
side_venv .venv-verifiers python3 tests/interop/verifiers-constraints.txt verifiers pytest pytest-asyncio -e proto -e adapters -e testing
side_venv .venv-openenv python3 tests/interop/openenv-constraints.txt openenv-core pytest pytest-asyncio -e proto -e adapters -e testing
side_venv .venv-nemo-gym "$(python312)" tests/interop/nemo-gym-constraints.txt nemo-gym pytest pytest-asyncio -e proto -e adapters -e testing

openrlhf_stamp=".venv-openrlhf/.built-$(stamp_of)"
if [ ! -f "$openrlhf_stamp" ]; then
  rm -rf .venv-openrlhf
  for version in "${OPENRLHF_VERSIONS[@]}"; do
    .venv/bin/pip install -q --no-deps --target ".venv-openrlhf/$version" "openrlhf==$version"
  done
  .venv/bin/pip install -q --target .venv-openrlhf/deps aiohttp==3.14.5 pylatexenc==2.11
  touch "$openrlhf_stamp"
fi
