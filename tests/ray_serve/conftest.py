"""A real two-node Ray cluster on this machine, and deploy/ray/serve.yaml deployed on it with `serve deploy`.

The tests need the `ray` extra: `make ray-test` runs them from .venv-ray (CORRGRPO_RAY_TEST=1); `make test`
skips this folder, as it does the interop stacks. The nodes run the shipped settings (efficiency measured).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

from corrgrpo_devtools.ray_config import SERVE_CONFIG
from corrgrpo_testing.bad_input import BODY_LIMIT
from corrgrpo_testing.environment import REDIS_URL
from corrgrpo_testing.servers import free_port

from .cluster import NODE_CPUS, RAY_ENV, TOKEN, Deployed, sized_config, wait_running

if TYPE_CHECKING:
    from ray.cluster_utils import Cluster

REPO = Path(__file__).resolve().parents[2]
RAY_TESTS = ["test_auth.py", "test_hostile.py", "test_reliability.py", "test_replica.py", "test_serve.py"]
collect_ignore = [] if os.environ.get("CORRGRPO_RAY_TEST") == "1" else RAY_TESTS
DEPLOY_TIMEOUT_S = 420  # three applications' imports (AgentDojo's take seconds) on a loaded two-core machine


@pytest.fixture(scope="package")
def cluster() -> Iterator[Cluster]:
    """A head and a worker node, the store's settings and the bearer token in their environment as
    `ray start`'s would be."""
    from ray.cluster_utils import (
        Cluster,
    )  # imported here: the conftest is also read where Ray is not installed

    node_env = {
        **RAY_ENV,
        "CORRGRPO_REDIS_URL": REDIS_URL,
        "CORRGRPO_STORE_SECRET": os.environ["CORRGRPO_STORE_SECRET"],  # tests/conftest.py's
        "CORRGRPO_API_TOKEN": TOKEN,
        "CORRGRPO_MAX_BODY_BYTES": str(BODY_LIMIT),  # test_reliability.py: a 4 MiB limit, not 64
        "CORRGRPO_CODE_CACHE_PREFIX": f"corrgrpo-ray-test:{uuid.uuid4().hex}:",
    }
    saved = {name: os.environ.get(name) for name in node_env}
    os.environ.update(node_env)  # the nodes' processes inherit it, and so the replicas
    head = {
        "num_cpus": NODE_CPUS,
        "node_ip_address": "127.0.0.1",
        "gcs_server_port": free_port(),
        "include_dashboard": True,
        "dashboard_host": "127.0.0.1",
        "dashboard_port": free_port(),
    }
    cluster = Cluster(initialize_head=True, head_node_args=head)
    try:
        cluster.add_node(num_cpus=NODE_CPUS, node_ip_address="127.0.0.1")
        cluster.wait_for_nodes()
        yield cluster
    finally:
        cluster.shutdown()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="package")
def deployed(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Deployed:
    """Every declared service deployed with the documented command:
    `serve deploy <config> --address <dashboard>`."""
    dashboard = f"http://{cluster.webui_url}"
    config = sized_config((REPO / SERVE_CONFIG).read_text(), free_port())
    path = tmp_path_factory.mktemp("serve") / "serve.yaml"
    path.write_text(yaml.safe_dump(config))
    start = time.monotonic()
    serve = Path(sys.executable).with_name("serve")
    subprocess.run([str(serve), "deploy", str(path), "--address", dashboard], check=True, timeout=120)
    wait_running(dashboard, [application["name"] for application in config["applications"]], DEPLOY_TIMEOUT_S)
    nodes = {node.node_id for node in [cluster.head_node, *cluster.worker_nodes]}
    http = config["http_options"]
    return Deployed(f"http://{http['host']}:{http['port']}", dashboard, time.monotonic() - start, nodes)
