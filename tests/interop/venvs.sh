#!/usr/bin/env bash
# Side environments for `make interop`: the other RL stacks' own code, from PyPI, outside .venv.
#   .venv-verl      a venv with verl 0.9.1 (its transformers pin clashes with TRL's), corrgrpo-proto and the
#                   core of corrgrpo-trainer (torch only: the verl plugin), as a verl user would install them.
#   .venv-openrlhf  OpenRLHF 0.11.0 and 0.11.2 side by side (`pip --target`, no dependencies) plus the two
#                   modules `openrlhf.utils` imports that .venv lacks; the tests import them from .venv.
# Idempotent: each is rebuilt only when this script or its pins change (stamp file).
set -euo pipefail
cd "$(dirname "$0")/../.."
OPENRLHF_VERSIONS=(0.11.0 0.11.2)
stamp_of() { cat tests/interop/venvs.sh "$@" | sha256sum | cut -c1-16; }

verl_stamp=".venv-verl/.built-$(stamp_of tests/interop/verl-constraints.txt)"
if [ ! -f "$verl_stamp" ]; then
  rm -rf .venv-verl
  python3 -m venv .venv-verl
  .venv-verl/bin/pip install -q -c tests/interop/verl-constraints.txt \
    verl cachetools fastapi uvicorn pytest pytest-asyncio -e proto -e trainer
  touch "$verl_stamp"
fi

openrlhf_stamp=".venv-openrlhf/.built-$(stamp_of)"
if [ ! -f "$openrlhf_stamp" ]; then
  rm -rf .venv-openrlhf
  for version in "${OPENRLHF_VERSIONS[@]}"; do
    .venv/bin/pip install -q --no-deps --target ".venv-openrlhf/$version" "openrlhf==$version"
  done
  .venv/bin/pip install -q --target .venv-openrlhf/deps aiohttp==3.14.5 pylatexenc==2.11
  touch "$openrlhf_stamp"
fi
