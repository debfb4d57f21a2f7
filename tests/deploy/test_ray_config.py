"""deploy/ray/serve.yaml agrees with the declarations (no Ray needed; tests/ray_serve deploys it on a
cluster)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from corrgrpo_common import declared
from corrgrpo_common.settings import env_name
from corrgrpo_devtools import ray_config

REPO = Path(__file__).resolve().parents[2]


def applications() -> dict[str, dict[str, Any]]:
    config = yaml.safe_load((REPO / ray_config.SERVE_CONFIG).read_text())
    return {application["name"]: application for application in config["applications"]}


def test_serve_config_is_in_sync_with_the_declarations() -> None:
    for path, text in ray_config.rendered().items():
        assert path.read_text() == text, f"{path} drifted: run `make manifests`"


def test_every_declared_service_is_an_application_of_its_own() -> None:
    assert list(applications()) == list(declared())
    for name, application in applications().items():
        assert application["route_prefix"] == f"/{name}"
        assert application["import_path"] == ray_config.IMPORT_PATH
        assert application["args"] == {"service": name}
        (deployment,) = application["deployments"]
        assert deployment["name"] == name  # the builder names the deployment after the service


@pytest.mark.parametrize("name", list(declared()))
def test_replicas_resources_and_environment_come_from_the_declaration(name: str) -> None:
    service = declared()[name]
    application = applications()[name]
    (deployment,) = application["deployments"]
    resources = service.deploy.resources
    assert deployment["ray_actor_options"] == {
        "num_cpus": resources.cpu_request,
        "memory": resources.memory_request_mib * 2**20,
    }
    if service.deploy.autoscale:
        scaling = deployment["autoscaling_config"]
        assert (scaling["min_replicas"], scaling["max_replicas"]) == service.deploy.autoscale
        assert "num_replicas" not in deployment
    else:
        assert deployment["num_replicas"] == service.deploy.replicas
    env = application.get("runtime_env", {}).get("env_vars", {})
    setting = service.deploy.workers_setting
    sized = {env_name(service.settings, setting)} if setting else set()
    # Compose's variables, less the worker count a replica sizes from its num_cpus; no store URL or secret in
    # the file.
    assert env == {k: v for k, v in service.deploy.env.items() if k not in sized}
    assert not {"CORRGRPO_REDIS_URL", "CORRGRPO_STORE_SECRET"} & set(env)


@pytest.mark.parametrize("name", list(declared()))
def test_a_declared_workers_setting_is_a_setting_of_the_service(name: str) -> None:
    service = declared()[name]
    if service.deploy.workers_setting is not None:
        assert service.deploy.workers_setting in service.settings.model_fields
