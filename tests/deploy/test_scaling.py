"""Horizontal scaling on loopback: three code-service replicas behind nginx, one Redis.

nginx runs deploy/nginx/nginx.conf itself; only upstreams.conf (compose DNS names there) is replaced
by upstream groups of the loopback replicas. Shows that requests spread over the
replicas, that all of them still succeed when a replica is SIGKILLed mid-run, and that the
reference-time cache measured by one replica is read by the others.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from corrgrpo_common.registry import default_ports
from corrgrpo_testing.environment import REDIS_URL
from corrgrpo_testing.servers import ServiceProcess, free_port, start_service

REPO = Path(__file__).resolve().parents[2]
NGINX_DIR = REPO / "deploy" / "nginx"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
SERVICE_PORTS = default_ports()  # from the services' declarations
REPLICAS = 3


def loopback_upstreams(compose_upstreams: str, replicas: dict[str, list[str]], ports: dict[str, int]) -> str:
    """The compose map (listening port -> `<service>:<port>`, a DNS name) with each service's port
    replaced by the test's own and its name by an upstream group of loopback replicas."""
    names = re.findall(r"^\s*\d+ (\w+):\d+;$", compose_upstreams, flags=re.M)
    groups = "".join(
        f"upstream {name} {{\n" + "".join(f"    server {a};\n" for a in replicas[name]) + "}\n"
        for name in names
    )
    return (
        groups
        + "map $server_port $pool {\n"
        + "".join(f"    {ports[name]} {name};\n" for name in names)
        + "}\n"
    )


@dataclass
class Balancer:
    url: str
    replicas: list[ServiceProcess]


def wait_for(url: str, process: subprocess.Popen[bytes], timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, f"nginx exited with {process.returncode}"
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise TimeoutError(f"{url} did not answer through nginx")


def start_replicas(stack: ExitStack, count: int, env: dict[str, str], tmp_dir: str) -> list[ServiceProcess]:
    """Start `count` code replicas at once (start-up is mostly imports); each is stopped by `stack`."""
    managers: list[AbstractContextManager[ServiceProcess]] = [
        start_service("code", env=env, tmp_dir=tmp_dir) for _ in range(count)
    ]
    with ThreadPoolExecutor(count) as pool:
        futures = [pool.submit(manager.__enter__) for manager in managers]
    for manager, future in zip(managers, futures, strict=True):
        if future.exception() is None:
            stack.push(manager.__exit__)
    return [future.result() for future in futures]


def delete_keys(prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    for key in client.scan_iter(f"{prefix}*"):
        client.delete(key)
    client.close()


@pytest.fixture(scope="module")
def balancer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Balancer]:
    """Three replicas and nginx for the whole module (start-up is the expensive part).

    The tests run in file order: the cache test needs all three replicas, the last test kills one."""
    tmp_path = tmp_path_factory.mktemp("lb")
    prefix = f"corrgrpo-test:{uuid.uuid4().hex}:"
    env = {
        "CORRGRPO_REDIS_URL": REDIS_URL,
        "CORRGRPO_CODE_CACHE_PREFIX": prefix,
        "CORRGRPO_CODE_WORKERS": "1",
    }
    env["CORRGRPO_CODE_EFFICIENCY_MODE"] = "paper"  # the replicas share the paper mode's t_ref
    with ExitStack() as stack:
        stack.callback(delete_keys, prefix)
        replicas = start_replicas(stack, REPLICAS, env, str(tmp_path))
        ports = {name: free_port() for name in SERVICE_PORTS}
        conf = (NGINX_DIR / "nginx.conf").read_text()
        for name, port in SERVICE_PORTS.items():
            conf = re.sub(rf"listen {port}\b", f"listen {ports[name]}", conf)
        # The other services' groups only have to exist for the config to load: nothing listens there.
        upstreams = {name: [f"127.0.0.1:{free_port()}"] for name in SERVICE_PORTS}
        upstreams["code"] = [replica.url.removeprefix("http://") for replica in replicas]
        (tmp_path / "nginx.conf").write_text(conf)
        compose_upstreams = (NGINX_DIR / "upstreams.conf").read_text()
        (tmp_path / "upstreams.conf").write_text(loopback_upstreams(compose_upstreams, upstreams, ports))
        argv = [NGINX, "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf"), "-e", "stderr"]
        argv += ["-g", f"daemon off; pid {tmp_path / 'nginx.pid'};"]
        with open(tmp_path / "nginx.log", "wb") as log:
            nginx = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            url = f"http://127.0.0.1:{ports['code']}"
            wait_for(f"{url}/healthz", nginx)
            yield Balancer(url, replicas)
        except BaseException:
            print((tmp_path / "nginx.log").read_text()[-4000:])
            raise
        finally:
            nginx.terminate()
            nginx.wait(10)


def served(replica: ServiceProcess, route: str) -> int:
    """Requests this replica answered with 200 on `route`, from its own /metrics."""
    text = httpx.get(f"{replica.url}/metrics", timeout=5).text
    pattern = (
        rf'^corrgrpo_requests_total\{{[^}}]*route="{re.escape(route)}"[^}}]*status="200"[^}}]*\}} (\S+)$'
    )
    return sum(int(float(value)) for value in re.findall(pattern, text, flags=re.M))


def test_loopback_upstreams_cover_every_compose_port() -> None:
    replicas = {name: [f"{name}-a:1", f"{name}-b:2"] for name in SERVICE_PORTS}
    ports = {name: index for index, name in enumerate(SERVICE_PORTS, start=1)}
    text = loopback_upstreams((NGINX_DIR / "upstreams.conf").read_text(), replicas, ports)
    assert not re.search(r"^resolver ", text, flags=re.M)
    assert re.findall(r"^\s*server ([^;]*);", text, flags=re.M) == [
        a for name in SERVICE_PORTS for a in replicas[name]
    ]
    assert re.findall(r"^\s*(\d+) (\w+);", text, flags=re.M) == [
        (str(ports[name]), name) for name in SERVICE_PORTS
    ]


ADD = {
    "task_id": "deploy-add",
    "prompt": "",
    "entry_point": "add",
    "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-4, 4) == 0\n",
    "reference": "def add(a, b):\n    return a + b\n",
}
COMPLETION = "```python\ndef add(a, b):\n    return a + b\n```"


def test_replicas_share_the_reference_time_cache(balancer: Balancer) -> None:
    body = {"items": [{"completion": COMPLETION, "problem": ADD}]}
    first = httpx.post(f"{balancer.url}/v1/score", json=body, timeout=60)
    assert first.status_code == 200, first.text
    (measured,) = first.json()["results"]
    assert measured["components"]["correct"] == 1.0 and measured["info"]["t_ref_source"] != "cache"
    # Every replica, asked directly, reads the t_ref the first one measured (which kept it in memory).
    sources = []
    for replica in balancer.replicas:
        (result,) = httpx.post(f"{replica.url}/v1/score", json=body, timeout=60).json()["results"]
        sources.append(result["info"]["t_ref_source"])
        assert result["info"]["t_ref"] == measured["info"]["t_ref"]
    assert sorted(sources) == ["cache"] * (len(sources) - 1) + ["memory"], sources


def test_requests_spread_over_replicas_and_survive_a_killed_one(balancer: Balancer) -> None:
    route, requests = "/v1/components", 60
    addresses: list[str] = []
    with httpx.Client(base_url=balancer.url, timeout=10) as client:
        for index in range(requests):
            if index == requests // 2:
                victim = balancer.replicas[1]
                os.killpg(victim.process.pid, signal.SIGKILL)  # the whole container, as it were
                victim.process.wait(10)
            response = client.get(route)
            assert response.status_code == 200, response.text
            assert response.json()["service"] == "code"
            addresses.append(response.headers["x-upstream-addr"])
    replica_addresses = {replica.url.removeprefix("http://") for replica in balancer.replicas}
    first_half = set(addresses[: requests // 2])
    assert first_half == replica_addresses, "round robin reached every replica"
    victim_address = balancer.replicas[1].url.removeprefix("http://")
    after = addresses[requests // 2 :]
    # A request that went to the dead replica first was retried on another one (proxy_next_upstream).
    assert any(a.startswith(f"{victim_address}, ") for a in after), after
    assert all(a.split(", ")[-1] != victim_address for a in after)
    # The survivors' own counters agree with what nginx reports.
    for replica in (balancer.replicas[0], balancer.replicas[2]):
        address = replica.url.removeprefix("http://")
        assert served(replica, route) == sum(a.split(", ")[-1] == address for a in addresses) > 0
