"""`docker compose up` for real (run by `make compose-test`, which starts an engine when none answers).

Builds the images, starts the services-only stack (Compose v2), and checks through nginx: every service
scores, `code` scaled to 3 replicas spreads requests, a replica killed mid-batch loses and duplicates no
item (the client retries), a Redis restart gives an AgentDojo episode a 503/404 or its true reward,
candidates inside the code container run under bwrap (no network, read-only file system, clean
environment), tests/security/test_shapes.py's hostile completions through nginx score as the candidate's
failure, and each service image holds only its own parts (no dev tools). The engine is reached with
the Docker SDK for Python; `down -v` at the end.

Not collected by `make test` (no `test_` prefix): it needs a Docker engine and builds images.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import httpx
import pytest
from docker.models.containers import Container

from corrgrpo_common.registry import declared, default_ports
from corrgrpo_proto import RewardClient
from corrgrpo_testing.bad_input import (
    check_garbage_completions,
    check_hostile_bodies,
    check_schema_violations,
)
from corrgrpo_testing.manifests import compose as compose_file

REPO = Path(__file__).resolve().parents[2]
OVERRIDE = Path(__file__).with_name("compose.test.yml")
PORTS = default_ports()  # from the services' declarations
REPLICAS = 3
SUMMARY: dict[str, Any] = {}

ADD = {
    "task_id": "compose/add",
    "entry_point": "add",
    "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-4, 4) == 0\n",
    "reference": "def add(a, b):\n    return a + b\n",
}
RIGHT = "```python\nimport time\n\ndef add(a, b):\n    time.sleep(0.2)\n    return a + b\n```"
WRONG = "```python\ndef add(a, b):\n    return a - b\n```"


@dataclass
class Stack:
    project: str
    env: dict[str, str]
    engine: docker.DockerClient
    timings: dict[str, float] = field(default_factory=dict)

    def compose(self, *args: str, timeout: float = 900) -> None:
        argv = [
            "docker",
            "compose",
            "-p",
            self.project,
            "-f",
            "docker-compose.yml",
            "-f",
            str(OVERRIDE),
            *args,
        ]
        run = subprocess.run(
            argv, cwd=REPO, env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        assert run.returncode == 0, (
            f"{' '.join(argv[3:])} failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
        )

    def containers(self, service: str) -> list[Container]:
        labels = [f"com.docker.compose.project={self.project}", f"com.docker.compose.service={service}"]
        found = self.engine.containers.list(filters={"label": labels, "status": "running"})
        return sorted(found, key=lambda c: c.name)

    def address(self, container: Container, network: str = "default") -> str:
        container.reload()
        return container.attrs["NetworkSettings"]["Networks"][f"{self.project}_{network}"]["IPAddress"]

    def url(self, service: str) -> str:
        """The service's endpoint on nginx, reached on the project's bridge network (no host port)."""
        (lb,) = self.containers("lb")
        return f"http://{self.address(lb)}:{PORTS[service]}"

    def wait_healthy(self, service: str, count: int, timeout_s: float = 240) -> list[Container]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = self.containers(service)
            states = [c.attrs["State"].get("Health", {}).get("Status") for c in found]
            if len(found) == count and states == ["healthy"] * count:
                return found
            time.sleep(1)
        raise TimeoutError(f"{service}: {count} healthy containers expected, have {states}")


def timed(stack: Stack, name: str, step: Callable[[], None]) -> None:
    started = time.monotonic()
    step()
    stack.timings[name] = time.monotonic() - started


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    env = dict(os.environ)
    for variable in ("CORRGRPO_PYTHON_IMAGE", "CORRGRPO_REDIS_IMAGE", "CORRGRPO_NGINX_IMAGE"):
        assert env.get(variable), f"{variable} is not set (make compose-test sets the stand-in images)"
    stack = Stack(f"corrgrpo-ct-{uuid.uuid4().hex[:8]}", env, docker.from_env(timeout=300))
    started = time.monotonic()
    try:
        timed(stack, "build", lambda: stack.compose("build", *PORTS))
        timed(stack, "up", lambda: stack.compose("up", "-d", "--wait", "--wait-timeout", "300"))
        yield stack
    finally:
        timed(stack, "down", lambda: stack.compose("down", "-v", "--remove-orphans", "--timeout", "5"))
        leftovers = stack.engine.containers.list(
            all=True, filters={"label": f"com.docker.compose.project={stack.project}"}
        )
        assert leftovers == [], "down -v left containers behind"
        SUMMARY["time_s"] = round(time.monotonic() - started, 1)
        SUMMARY["phases_s"] = {name: round(value, 1) for name, value in stack.timings.items()}
        print("\ncompose-test summary: " + json.dumps(SUMMARY))


def test_every_service_is_healthy_and_scores_through_nginx(stack: Stack) -> None:
    for service in ("redis", *PORTS, "lb"):
        assert len(stack.wait_healthy(service, 1)) == 1
    with httpx.Client(timeout=60) as http:
        code = http.post(
            f"{stack.url('code')}/v1/score",
            json={"items": [{"completion": c, "problem": ADD} for c in (RIGHT, WRONG)]},
        )
        assert code.status_code == 200, code.text
        right, wrong = code.json()["results"]
        assert (right["components"]["correct"], wrong["components"]["correct"]) == (1.0, 0.0)
        assert right["info"]["isolation"] == "bwrap"
        # Every service's declared example item, through nginx, scores its declared components.
        for name, service in declared().items():
            response = http.post(f"{stack.url(name)}/v1/score", json={"items": [service.example(None)]})
            assert response.status_code == 200, response.text
            assert set(response.json()["results"][0]["components"]) == {c.name for c in service.components}, (
                response.text
            )
        suites = http.get(f"{stack.url('agentdojo')}/v1/tasks").json()["suites"]
        assert {"workspace", "travel", "banking", "slack"} <= set(suites)
    SUMMARY["services_scored"] = sorted(PORTS)


# What a service image holds of ours, by distribution name (importlib.metadata inside its container).
INSTALLED = (
    "import importlib.metadata as m, json; names = (d.metadata['Name'].lower().replace('_', '-') for d in "
    "m.distributions()); "
    "print(json.dumps(sorted(name for name in names if name.startswith('corrgrpo-'))))"
)


def test_each_service_image_holds_its_parts_and_no_dev_tools(stack: Stack) -> None:
    """proto, services/common, the service and its LOCAL_PARTS build args; devtools, testing, trainer
    never."""
    for name, service in compose_file()["services"].items():
        if name not in PORTS:
            continue
        local = service["build"]["args"].get("LOCAL_PARTS", "").split()
        expected = sorted(
            {"corrgrpo-proto", "corrgrpo-common", f"corrgrpo-{name}", *(f"corrgrpo-{p}" for p in local)}
        )
        run = stack.containers(name)[0].exec_run(["python", "-c", INSTALLED])
        assert run.exit_code == 0, run.output
        assert json.loads(run.output) == expected, name
    SUMMARY["image_parts"] = "only each service's own parts"


# What a candidate sees, as JSON (the service compares it with the expected value in its own process).
PROBE = """
def probe():
    import errno, os, socket
    seen = {}
    for key, host in (("redis", "redis"), ("redis_ip", "REDIS_IP")):
        try:
            socket.create_connection((host, 6379), timeout=2).close()
            seen[key] = "reachable"
        except socket.gaierror:
            seen[key] = "unresolved"
        except OSError as error:
            seen[key] = errno.errorcode[error.errno]
    seen["write"] = {}
    for path in ("/", "/usr", "/etc"):
        try:
            open(os.path.join(path, "probe"), "w").close()
            seen["write"][path] = "written"
        except OSError as error:
            seen["write"][path] = errno.errorcode[error.errno]
    seen["visible"] = [p for p in ("/opt/venv", "/shared/data", "/proc/1/root/opt/venv") if os.path.exists(p)]
    seen["env"] = sorted(os.environ)
    # pid 1 is the worker (bwrap --as-pid-1): its /proc entry is hidden (its counters told of earlier runs)
    try:
        seen["pid1_env"] = open("/proc/1/environ", "rb").read().decode()
    except OSError as error:
        seen["pid1_env"] = errno.errorcode[error.errno]
    return seen
"""
ISOLATED = {
    "redis": "unresolved",  # no network at all: no DNS answer
    "redis_ip": "EPERM",  # no socket but AF_UNIX (seccomp): not even a route to try
    "write": {"/": "EROFS", "/usr": "EROFS", "/etc": "EROFS"},
    "visible": [],
    "env": ["HOME", "LANG", "PATH", "PWD", "TMPDIR"],
    "pid1_env": "ENOENT",
}


def test_candidates_run_under_bwrap_inside_the_code_container(stack: Stack) -> None:
    (code,) = stack.containers("code")
    host = code.attrs["HostConfig"]
    # What bwrap needs, and nothing more: no capability, no privileged mode, a non-root user.
    assert {"seccomp=unconfined", "apparmor=unconfined", "no-new-privileges:true"} <= set(host["SecurityOpt"])
    assert host["CapDrop"] == ["ALL"] and not host["CapAdd"] and host["Privileged"] is False
    assert host["ReadonlyRootfs"] is True and code.attrs["Config"]["User"] == "10001"
    assert host["MaskedPaths"] == [], "systempaths=unconfined: bwrap mounts a fresh /proc"
    (redis,) = stack.containers("redis")
    # Redis is on the internal network only
    probe = PROBE.replace("REDIS_IP", stack.address(redis, "backend"))
    # Negative control: the same probe run by the service's own interpreter (outside the sandbox).
    outside = code.exec_run(["python", "-c", probe + "import json; print(json.dumps(probe()))"])
    assert outside.exit_code == 0, outside.output
    seen = json.loads(outside.output)
    assert seen["redis"] == seen["redis_ip"] == "reachable", seen
    assert "/opt/venv" in seen["visible"] and "CORRGRPO_REDIS_URL" in seen["env"], seen
    # The probe as a candidate: `correct` only if every observation matches the isolated one; one item
    # per observation, so a failure names what leaked.
    items = []
    for key, value in ISOLATED.items():
        test = f"def check(candidate):\n    assert candidate()[{key!r}] == {value!r}\n"
        problem = {
            "task_id": f"compose/probe-{key}",
            "entry_point": "probe",
            "test": test,
            "reference": probe,
        }
        items.append({"completion": f"```python\n{probe}\n```", "problem": problem})
    response = httpx.post(f"{stack.url('code')}/v1/score", json={"items": items}, timeout=120)
    assert response.status_code == 200, response.text
    verdicts = {
        key: r["components"]["correct"] for key, r in zip(ISOLATED, response.json()["results"], strict=True)
    }
    assert verdicts == dict.fromkeys(ISOLATED, 1.0), (verdicts, response.json()["results"])
    SUMMARY["sandbox_in_container"] = "bwrap: " + ", ".join(f"{k} ok" for k in ISOLATED)


def test_without_unmasked_proc_the_code_service_refuses_to_start(stack: Stack) -> None:
    """What Compose v1 runs (it cannot pass systempaths=unconfined): bwrap cannot mount a fresh /proc, and the
    code service must exit with the reason instead of scoring unsandboxed."""
    (code,) = stack.containers("code")[:1]
    security = [opt for opt in code.attrs["HostConfig"]["SecurityOpt"] if opt != "systempaths=unconfined"]
    container = stack.engine.containers.run(
        code.image.id,
        detach=True,
        read_only=True,
        tmpfs={"/tmp": "exec"},  # as the stack mounts it: the sandbox's tmpfs root may run from there
        cap_drop=["ALL"],
        security_opt=security,
        environment={key: value for key, value in (e.split("=", 1) for e in code.attrs["Config"]["Env"])},
        network=f"{stack.project}_default",
    )
    try:
        status = container.wait(timeout=120)["StatusCode"]
        logs = container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)
    assert status != 0 and "bwrap" in logs and "proc" in logs, logs[-2000:]
    SUMMARY["compose_v1_options"] = "code service refuses to start (bwrap cannot mount /proc)"


def inflight(stack: Stack, replica: Container) -> float:
    text = httpx.get(f"http://{stack.address(replica)}:{PORTS['code']}/metrics", timeout=5).text
    match = re.search(r'^corrgrpo_inflight_items\{service="code"\} (\S+)$', text, flags=re.M)
    return float(match.group(1)) if match else 0.0


def test_scaled_code_spreads_requests_and_survives_a_killed_replica(stack: Stack) -> None:
    timed(
        stack,
        "scale",
        lambda: stack.compose("up", "-d", "--wait", "--scale", f"code={REPLICAS}", "--no-recreate"),
    )
    replicas = stack.wait_healthy("code", REPLICAS)
    addresses = {stack.address(replica) for replica in replicas}
    deadline, seen = time.monotonic() + 60, set()
    with httpx.Client(base_url=stack.url("code"), timeout=10) as http:
        # nginx re-resolves the name every 5 s: new replicas join without a restart.
        while seen != addresses and time.monotonic() < deadline:
            response = http.get("/v1/components")
            assert response.status_code == 200, response.text
            seen.add(response.headers["x-upstream-addr"].split(", ")[-1].rsplit(":", 1)[0])
    assert seen == addresses, f"requests reached {seen}, replicas are {addresses}"
    SUMMARY["replicas"] = len(seen)

    # Distinct programs (a comment naming the item): the code service runs a program once and shares its run
    # across batches and replicas, so repeated ones would be answered before any replica was seen scoring.
    rights = [i % 3 != 0 for i in range(36)]
    item_ids = [f"kill-{i}-{uuid.uuid4().hex[:6]}" for i in range(36)]
    items = [
        {
            "id": id_,
            "completion": (RIGHT if right else WRONG).replace("```python\n", f"```python\n# {id_}\n", 1),
            "problem": ADD,
        }
        for id_, right in zip(item_ids, rights, strict=True)
    ]
    results: list[Any] = []
    with RewardClient(
        stack.url("code"), chunk_size=3, max_concurrency=3, retries=20, backoff=0.3, max_backoff=2
    ) as client:
        batch = threading.Thread(target=lambda: results.extend(client.score(items)))
        batch.start()
        deadline = time.monotonic() + 60
        while not (busy := [r for r in replicas if inflight(stack, r) > 0]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert busy, "no replica was scoring"
        busy[0].kill()  # SIGKILL, mid-batch
        batch.join(300)
    assert not batch.is_alive()
    ids = [result.id for result in results]
    lost = len({item["id"] for item in items} - set(ids))
    duplicated = len(ids) - len(set(ids))
    wrong = [
        r.id
        for r, right in zip(results, rights, strict=False)
        if r.components is None or r.components["correct"] != right
    ]
    SUMMARY.update(items=len(items), lost=lost, duplicated=duplicated, wrong_rewards=len(wrong))
    assert ids == [item["id"] for item in items], "every item once, in order"
    assert (lost, duplicated, wrong) == (0, 0, []), results


def test_hostile_completions_through_nginx_are_the_candidates_failure(stack: Stack) -> None:
    """tests/security/test_shapes.py's bodies in shape `compose`: through nginx to the scaled code
    replicas."""
    env = {**os.environ, "CORRGRPO_TEST_SHAPES": "compose", "CORRGRPO_TEST_CODE_URL": stack.url("code")}
    argv = [sys.executable, "-m", "pytest", "tests/security/test_shapes.py", "-q", "-p", "no:cacheprovider"]
    run = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=1200, check=False)
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-2000:]
    SUMMARY["security_shapes"] = run.stdout.strip().splitlines()[-1]


def test_bad_input_through_nginx_is_a_4xx_or_a_per_item_result(stack: Stack) -> None:
    """The reliability suite's bad input (corrgrpo_testing.bad_input) in shape `compose`, every service
    through nginx: never a 5xx. The stack keeps its default 64 MiB body limit."""
    with httpx.Client(timeout=300) as http:
        for name in PORTS:
            check_hostile_bodies(http, stack.url(name), limit=64 << 20)
            check_schema_violations(http, stack.url(name), name)
            check_garbage_completions(http, stack.url(name), name)
    SUMMARY["bad_input"] = f"4xx or a per-item result through nginx: {', '.join(PORTS)}"


def test_agentdojo_episode_across_a_redis_restart_is_an_error_or_its_true_reward(stack: Stack) -> None:
    spec = {"suite": "banking", "user_task": "user_task_0", "injection_task": "injection_task_0"}
    step = {"tool_calls": [{"function": "get_most_recent_transactions", "args": {"n": 5}}]}
    finish = {"final_answer": "done"}
    with httpx.Client(base_url=stack.url("agentdojo"), timeout=60) as http:

        def start() -> str:
            created = http.post("/v1/episodes", json=spec)
            assert created.status_code == 200, created.text
            episode = created.json()["episode_id"]
            assert http.post(f"/v1/episodes/{episode}/step", json=step).status_code == 200
            return episode

        reference = http.post(f"/v1/episodes/{start()}/finish", json=finish)
        assert reference.status_code == 200, reference.text
        episode = start()
        (redis,) = stack.containers("redis")
        redis.stop(timeout=5)
        down = http.post(f"/v1/episodes/{episode}/step", json=step)
        assert down.status_code == 503 and down.json()["message"], down.text
        redis.start()
        stack.wait_healthy("redis", 1)
        deadline = time.monotonic() + 60
        while http.get("/readyz").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.5)
        after = http.post(f"/v1/episodes/{episode}/finish", json=finish)
    # The compose Redis keeps an append-only file: the episode may have survived (then its reward is
    # the one the same trajectory earns), or be gone (404). Never another reward.
    assert after.status_code in (200, 404), after.text
    if after.status_code == 200:
        assert after.json()["components"] == reference.json()["components"]
    SUMMARY["redis_restart"] = {200: "episode kept (AOF), same reward", 404: "episode gone: 404"}[
        after.status_code
    ]
