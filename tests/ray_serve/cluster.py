"""The test deployment: the generated Serve config sized for two cores, and what the Serve dashboard says of
it.

Both nodes are processes of this machine on 127.0.0.1 (nothing leaves loopback): the proxy runs on the head
only (the nodes share one address), replicas are small, and the code deployment autoscales 2 → 3 within
seconds.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

import httpx
import yaml

NODE_CPUS = 2  # logical CPUs per node: what Ray schedules by, not what the machine has
TOKEN = f"ray-test-{uuid.uuid4().hex}"  # the nodes' CORRGRPO_API_TOKEN (serve.yaml asks for one)
RAY_ENV = {
    # Ray resolves "127.0.0.1" to the machine's outward address unless told it is not a cluster member:
    # loopback only
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",  # no report sent out
    # A proxy sends requests to replicas on its own node while they have room; on a cluster every node's proxy
    # does so for its own. Here the head's proxy is the only one (the nodes share an address): it spreads over
    # both nodes.
    "RAY_SERVE_PROXY_PREFER_LOCAL_NODE_ROUTING": "0",
}
# Per deployment, what the test changes in the generated config: room for every replica on the two nodes
# (whose memory is the one machine's: no reservation), code autoscaled 2 → 3 within seconds.
SIZES: dict[str, dict[str, Any]] = {
    "code": {
        "ray_actor_options": {"num_cpus": 0.5},
        "autoscaling_config": {
            "min_replicas": 2,
            "max_replicas": 3,
            "target_ongoing_requests": 1,
            "upscale_delay_s": 0,
            "downscale_delay_s": 5,
            "look_back_period_s": 2,
        },
    },
    "toolcall": {"ray_actor_options": {"num_cpus": 0.25}, "num_replicas": 2},
    # its start-up is seconds of CPU
    "agentdojo": {"ray_actor_options": {"num_cpus": 0.25}, "num_replicas": 1},
}


@dataclass
class Deployed:
    url: str  # Serve's HTTP proxy; each service under /<name>
    dashboard: str
    deploy_s: float  # from `serve deploy` until every application runs
    nodes: set[str]  # the cluster's node ids

    def replicas(self, name: str) -> list[dict[str, Any]]:
        """The RUNNING replicas of a service's deployment (node_id, pid, replica_id, ...)."""
        applications = httpx.get(f"{self.dashboard}/api/serve/applications/", timeout=30).json()[
            "applications"
        ]
        replicas = applications[name]["deployments"][name]["replicas"]
        return [replica for replica in replicas if replica["state"] == "RUNNING"]


def sized_config(generated: str, http_port: int) -> dict[str, Any]:
    """The generated Serve config with SIZES applied, its proxy on the head only, on loopback at
    `http_port`."""
    config = yaml.safe_load(generated)
    config["proxy_location"] = "HeadOnly"
    config["http_options"] = {"host": "127.0.0.1", "port": http_port}
    for application in config["applications"]:
        (deployment,) = application["deployments"]
        deployment["ray_actor_options"].pop("memory")
        deployment.update(SIZES[application["name"]])
    return config


def wait_running(dashboard: str, names: list[str], timeout_s: float) -> None:
    """Return once every named application is RUNNING; AssertionError at once on DEPLOY_FAILED, else after
    timeout."""
    deadline, status = time.monotonic() + timeout_s, {}
    while time.monotonic() < deadline:
        try:
            applications = httpx.get(f"{dashboard}/api/serve/applications/", timeout=30).json()[
                "applications"
            ]
        except httpx.HTTPError:
            applications = {}
        status = {name: applications.get(name, {}).get("status") for name in names}
        if all(value == "RUNNING" for value in status.values()):
            return
        failed = {
            name: applications[name].get("message")
            for name, value in status.items()
            if value == "DEPLOY_FAILED"
        }
        assert not failed, f"deploy failed: {failed}"
        time.sleep(1)
    raise AssertionError(f"applications not RUNNING after {timeout_s:.0f} s: {status}")
