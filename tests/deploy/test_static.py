"""Deployment files, checked without a Docker engine or a cluster.

Dockerfiles run the same entrypoint the tests start; docker-compose.yml and the Kubernetes
manifests validate against their published JSON Schemas (vendored under deploy/schemas/) and agree
with the code: ports, environment variable names, health paths.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.metadata
import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
from packaging.requirements import Requirement

from corrgrpo_common import ServiceSettings, create_app, declared
from corrgrpo_devtools import k8s, manifests
from corrgrpo_proto import ComponentSpec
from corrgrpo_testing import servers
from corrgrpo_testing.manifests import compose, compose_errors, compose_validator, k8s_documents, k8s_errors

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "deploy" / "docker"
K8S = REPO / "deploy" / "k8s"
SERVICES = tuple(declared())  # every installed service, from its one declaration
# The folders each image installs: a service's own, the kit, and the parts its declaration adds (the code
# image's sandbox); the code image in particular holds no torch.
IMAGE_PARTS = {
    **{
        name: {
            "proto",
            "services/common",
            f"services/{name}",
            *service.deploy.build_args.get("LOCAL_PARTS", "").split(),
        }
        for name, service in declared().items()
    },
    "trainer": {"proto", "trainer"},
}


def default_port(service: str) -> int:
    return declared()[service].port


# ---------------------------------------------------------------- Dockerfiles


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    pairs = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            pairs.append((keyword.upper(), rest.strip()))
    return pairs


def last(dockerfile: Path, keyword: str) -> str:
    values = [rest for key, rest in instructions(dockerfile) if key == keyword]
    assert values, f"{dockerfile.name} has no {keyword}"
    return values[-1]


def dockerfile_of(service: str) -> Path:
    """The services share one parameterised Dockerfile; the trainer has its own."""
    return DOCKER / ("trainer.Dockerfile" if service == "trainer" else "service.Dockerfile")


def build_args(service: str) -> dict[str, str]:
    """The build args docker-compose.yml passes for `service` (none for the trainer)."""
    return compose()["services"][service]["build"].get("args", {})


def substitute(text: str, args: dict[str, str]) -> str:
    """`${NAME}` / `$NAME` of the Dockerfile replaced by the build args (other names are left as they are)."""
    return re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), text)


def image_cmd(service: str) -> list[str]:
    """The image's command as argv: the trainer's exec form, or the services' `exec ...` shell form
    with SERVICE and PORT (set from the build args as environment variables) substituted."""
    cmd = last(dockerfile_of(service), "CMD")
    if cmd.startswith("["):
        return json.loads(cmd)
    words = shlex.split(substitute(cmd, build_args(service)))
    assert words[0] == "exec", "exec: the service is PID 1 and gets the stop signal"
    return words[1:]


def entrypoint_started_by_tests(service: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """The argv corrgrpo_testing.servers starts for `service`, captured instead of run."""
    captured: list[list[str]] = []

    class Captured(Exception):
        pass

    def fake_popen(argv: list[str], **_: Any) -> None:
        captured.append(argv)
        raise Captured

    monkeypatch.setattr(servers.subprocess, "Popen", fake_popen)
    with pytest.raises(Captured), servers.start_service(service, port=4321, tmp_dir=str(tmp_path)):
        pass
    return captured[0]


@pytest.mark.parametrize("service", SERVICES)
def test_dockerfile_cmd_is_the_tested_entrypoint(
    service: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    tested, cmd = entrypoint_started_by_tests(service, monkeypatch, tmp_path), image_cmd(service)
    # Same module, same flags; only the bind address (all interfaces in a container) and port differ.
    assert cmd[0] == "python" and tested[1:3] == cmd[1:3] == ["-m", f"corrgrpo_{service}"]
    assert tested[3::2] == cmd[3::2] == ["--host", "--port"]
    assert cmd[4] == "0.0.0.0" and int(cmd[6]) == default_port(service)


@pytest.mark.parametrize("service", [*SERVICES, "trainer"])
def test_dockerfile_is_multistage_pinned_and_unprivileged(service: str) -> None:
    dockerfile = dockerfile_of(service)
    raw = instructions(dockerfile)
    steps = [(key, substitute(rest, build_args(service))) for key, rest in raw]
    # The base images are the Dockerfile's own defaults (compose passes the same unless told otherwise).
    args = dict(rest.split("=", 1) for key, rest in raw if key == "ARG" and "=" in rest)
    bases = [rest.split()[0] for key, rest in raw if key == "FROM"]
    if "PYTHON_IMAGE" in build_args(service):
        assert build_args(service)["PYTHON_IMAGE"] == "${CORRGRPO_PYTHON_IMAGE:-" + args["PYTHON_IMAGE"] + "}"
    assert len(bases) >= 2, "multi-stage: build stage + runtime stage"
    for base in bases:
        image = args.get(base.strip("${}"), base)
        assert re.fullmatch(r"[\w./-]+:\d[\w.-]*", image), (
            f"base image {image} is not pinned to a version tag"
        )
    assert re.fullmatch(r"\d+", last(dockerfile, "USER")) and last(dockerfile, "USER") != "0"
    installs = [rest for key, rest in steps if key == "RUN" and "pip install" in rest]
    assert installs and all(re.search(r"pip install -c /src/constraints[-\w]*\.txt", run) for run in installs)
    copied = {rest.split()[0] for key, rest in steps if key == "COPY" and not rest.startswith("--from")}
    # What the image installs: the folders pip is given (the services' LOCAL_PARTS included), or copies.
    words = (
        word.strip("'\"").split("[")[0] for run in installs for word in run.split()
    )  # "/src/part[extras]"
    installed = {word.removeprefix("/src/") for word in words if word.startswith("/src/")}
    installed |= set(build_args(service).get("LOCAL_PARTS", "").split())
    installed = {part for part in installed if (REPO / part).is_dir()} or copied - {"trainer/configs"}
    assert {part for part in installed if (REPO / part).is_dir()} == IMAGE_PARTS[service]
    for source in copied:
        assert (REPO / source).exists(), f"{dockerfile.name} copies {source}, which is not in the repository"


def test_no_part_of_an_image_imports_the_dev_tools() -> None:
    """The launcher, the README and manifest writers (devtools/) and the tests' helpers (testing/) are in
    no image."""
    parts = set().union(*(IMAGE_PARTS[name] for name in SERVICES))
    sources = [path for part in sorted(parts) for path in (REPO / part).rglob("*.py")]
    assert len(sources) > 20, parts  # the kit, proto and the services were found
    imports = re.compile(r"^\s*(from|import)\s+corrgrpo_(devtools|testing)\b", re.M)
    importing = [str(p.relative_to(REPO)) for p in sources if imports.search(p.read_text())]
    assert importing == []


@pytest.mark.parametrize("service", SERVICES)
def test_dockerfile_healthcheck_and_port_match_the_service(service: str) -> None:
    dockerfile, args = dockerfile_of(service), build_args(service)
    assert args["SERVICE"] == service and args["PORT"] == str(default_port(service))
    assert substitute(last(dockerfile, "EXPOSE"), args) == str(default_port(service))
    # The health check reads the port from the environment, set from the build arg.
    assert re.search(r"\bPORT=\$\{PORT\}", last(dockerfile, "ENV"))
    assert 'http://127.0.0.1:{os.environ[\\"PORT\\"]}/healthz' in last(dockerfile, "HEALTHCHECK")


def requirement_closure(distribution: str) -> set[str]:
    """Every distribution installed along with `distribution` (no extras), by normalised name."""
    seen: set[str] = set()
    todo = [distribution]
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in seen:
            continue
        seen.add(name)
        for line in importlib.metadata.requires(name) or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return seen


def test_code_image_holds_no_torch() -> None:
    closure = requirement_closure("corrgrpo-code")
    assert {"corrgrpo-sandbox", "corrgrpo-common", "corrgrpo-proto"} <= closure
    assert "torch" not in closure and "transformers" not in closure


def test_trainer_image_runs_the_trainer_cli() -> None:
    cmd = image_cmd("trainer")
    assert cmd[:4] == ["python", "-m", "corrgrpo_trainer", "train"]
    assert importlib.util.find_spec("corrgrpo_trainer") is not None


# ---------------------------------------------------------------- settings and routes


def settings_types() -> list[type[ServiceSettings]]:
    """The kit's settings and each declared service's."""
    return [ServiceSettings, *(service.settings for service in declared().values())]


def known_env_names() -> set[str]:
    """CORRGRPO_* names some code reads: settings fields, or literal names in the packages' source."""
    names = set()
    for settings in settings_types():
        prefix = settings.model_config.get("env_prefix", "")
        names |= {f"{prefix}{field}".upper() for field in settings.model_fields}
    for folder in ("sandbox", "services", "trainer"):
        for source in (REPO / folder).rglob("*.py"):
            names |= set(re.findall(r"CORRGRPO_[A-Z0-9_]+", source.read_text()))
    return names


def test_known_env_names_include_the_shared_settings() -> None:
    assert {"CORRGRPO_REDIS_URL", "CORRGRPO_LOG_JSON", "CORRGRPO_CODE_WORKERS"} <= known_env_names()


def health_paths() -> set[str]:
    """The paths of the kit's app, from its OpenAPI document (`app.routes` holds an included router
    unexpanded)."""
    app = create_app("probe", "0", [ComponentSpec(name="x", min=0, max=1)], ServiceSettings())
    return set(app.openapi()["paths"])


# ---------------------------------------------------------------- docker compose


def test_generated_parts_of_the_deployment_files_match_the_declarations() -> None:
    """`make manifests` (python -m corrgrpo_devtools.manifests) was run after the last change to a
    declaration."""
    assert manifests.drifted(write=False) == [], "run `make manifests`"


def test_compose_file_matches_the_compose_spec() -> None:
    assert compose_errors(compose()) == []


def test_compose_schema_rejects_a_misspelt_key() -> None:
    broken = compose()
    broken["services"]["code"]["helthcheck"] = broken["services"]["code"].pop("deploy")
    assert not compose_validator().is_valid(broken)


def test_compose_services_run_the_image_command_and_scale() -> None:
    services = compose()["services"]
    for name in SERVICES:
        service = services[name]
        assert service["build"]["dockerfile"] == "deploy/docker/service.Dockerfile"
        assert "command" not in service and "entrypoint" not in service, (
            "the image's CMD is what the tests cover"
        )
        assert "healthcheck" not in service, "the image's HEALTHCHECK on /healthz applies"
        # Scalable: no fixed name and no host port, reached through the load balancer only.
        assert "container_name" not in service and "ports" not in service
        assert service["expose"] == [str(default_port(name))]
        assert services["lb"]["depends_on"][name] == {"condition": "service_healthy"}
        assert service["depends_on"]["redis"] == {"condition": "service_healthy"}
    published = {port.rsplit(":", 2)[-2:][0] for port in services["lb"]["ports"]}
    assert published == {str(default_port(name)) for name in SERVICES}


def test_compose_profiles_and_gpu_reservation() -> None:
    services = compose()["services"]
    assert services["trainer"]["profiles"] == ["train"]
    assert all("profiles" not in services[name] for name in (*SERVICES, "redis", "lb")), (
        "plain `up` = services only"
    )
    devices = services["trainer"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    command = services["trainer"]["command"]
    assert command[:4] == image_cmd("trainer")[:4]


def test_compose_code_service_grants_what_bwrap_needs() -> None:
    code = compose()["services"]["code"]
    assert {"seccomp=unconfined", "apparmor=unconfined", "systempaths=unconfined"} <= set(
        code["security_opt"]
    )
    assert code["environment"]["CORRGRPO_CODE_ISOLATION"] == "${CORRGRPO_CODE_ISOLATION:-bwrap}"
    assert "privileged" not in code and "cap_add" not in code
    assert code["tmpfs"] == ["/tmp:exec"]  # the sandbox's tmpfs copy of the interpreter runs from there


def test_compose_environment_names_exist_in_the_code() -> None:
    known = known_env_names()
    for name, service in compose()["services"].items():
        used = {key for key in service.get("environment", {}) if key.startswith("CORRGRPO_")}
        assert used - known == set(), f"{name} sets variables no code reads"
    redis_url = compose()["x-common-env"]["CORRGRPO_REDIS_URL"]
    assert redis_url.startswith("redis://redis:6379/") and "redis" in compose()["services"]


def test_nginx_routes_each_port_to_its_service() -> None:
    conf = (REPO / "deploy" / "nginx" / "nginx.conf").read_text()
    upstreams_conf = (REPO / "deploy" / "nginx" / "upstreams.conf").read_text()
    # No upstream block with `server ... resolve` (nginx >= 1.27.3 only): $pool is resolved per request.
    assert not re.search(r"\bupstream\s+\w+\s*\{", upstreams_conf + conf)
    assert re.search(r"^resolver 127\.0\.0\.11 valid=\d+s", upstreams_conf, flags=re.M), (
        "Docker's DNS, short cache"
    )
    pools = dict(re.findall(r"^\s*(\d+)\s+([\w:]+);", upstreams_conf, flags=re.M))
    listens = set(re.findall(r"listen\s+(\d+)[ ;]", conf))
    assert "proxy_pass http://$pool;" in conf
    for name in SERVICES:
        port = str(default_port(name))
        assert pools[port] == f"{name}:{port}" and port in listens
    assert re.search(r"proxy_next_upstream\s+error timeout http_502 http_503 non_idempotent;", conf)
    mounted = {volume.split(":")[0] for volume in compose()["services"]["lb"]["volumes"]}
    assert mounted == {"./deploy/nginx/nginx.conf", "./deploy/nginx/upstreams.conf"}


# ---------------------------------------------------------------- Kubernetes


BASE = k8s_documents(K8S / "base")
OVERLAYS = sorted(path.parent for path in (K8S / "overlays").glob("*/kustomization.yaml"))


@pytest.mark.parametrize("folder", [K8S / "base", *OVERLAYS], ids=lambda p: p.name)
def test_kubernetes_manifests_match_their_schemas(folder: Path) -> None:
    documents = k8s_documents(folder)
    assert {d["kind"] for d in documents} >= {"Deployment", "Service", "HorizontalPodAutoscaler", "ConfigMap"}
    assert [error for document in documents for error in k8s_errors(document)] == []


def test_kubernetes_schema_rejects_a_misplaced_field() -> None:
    deployment = next(d for d in BASE if d["kind"] == "Deployment")
    broken = jsonpatch.apply_patch(
        deployment, [{"op": "add", "path": "/spec/template/spec/replicas", "value": 3}]
    )
    assert k8s_errors(broken) != []


def by_kind(documents: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in documents if d["kind"] == kind}


def test_kubernetes_deployments_match_the_images_and_the_code() -> None:
    deployments, services = by_kind(BASE, "Deployment"), by_kind(BASE, "Service")
    paths = health_paths()
    for name in SERVICES:
        pod = deployments[name]["spec"]["template"]
        (container,) = pod["spec"]["containers"]
        assert container["args"] == image_cmd(name)
        assert container["ports"] == [{"name": "http", "containerPort": default_port(name)}]
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert {"/readyz", "/healthz"} <= paths
        assert {"requests", "limits"} <= set(container["resources"])
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
        selector = deployments[name]["spec"]["selector"]["matchLabels"]
        assert selector.items() <= pod["metadata"]["labels"].items()
        assert services[name]["spec"]["selector"] == selector
        assert services[name]["spec"]["ports"][0]["port"] == default_port(name)


def test_kubernetes_configuration_names_exist_in_the_code() -> None:
    known = known_env_names()
    (config,) = by_kind(BASE, "ConfigMap").values()
    assert set(config["data"]) - known == set()
    assert config["data"]["CORRGRPO_REDIS_URL"].startswith("redis://redis:6379/") and "redis" in by_kind(
        BASE, "Service"
    )
    for deployment in by_kind(BASE, "Deployment").values():
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            names = {env["name"] for env in container.get("env", []) if env["name"].startswith("CORRGRPO_")}
            assert names - known == set()


def test_kubernetes_code_autoscaler_and_no_bwrap_overlay() -> None:
    (hpa,) = by_kind(BASE, "HorizontalPodAutoscaler").values()
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "code"}
    assert hpa["spec"]["minReplicas"] >= 2
    base_code = by_kind(BASE, "Deployment")["code"]["spec"]["template"]["spec"]
    assert (
        base_code["containers"][0]["securityContext"]["procMount"] == "Unmasked"
        and base_code["hostUsers"] is False
    )
    # the sandbox's tmpfs root (always resident) needs more than a pod's 64 MiB /dev/shm: a memory volume
    # there
    (shm,) = [m["name"] for m in base_code["containers"][0]["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    (volume,) = [v for v in base_code["volumes"] if v["name"] == shm]
    assert volume["emptyDir"]["medium"] == "Memory" and volume["emptyDir"]["sizeLimit"] == "256Mi"
    overlay_code = by_kind(k8s_documents(K8S / "overlays" / "no-bwrap"), "Deployment")["code"]["spec"][
        "template"
    ]["spec"]
    env = {e["name"]: e["value"] for e in overlay_code["containers"][0]["env"]}
    assert env["CORRGRPO_CODE_ISOLATION"] == "unsafe-none" and "hostUsers" not in overlay_code
    assert overlay_code["containers"][0]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    # /readyz is 503 unisolated
    assert overlay_code["containers"][0]["readinessProbe"]["httpGet"]["path"] == "/healthz"


def test_readme_commands_name_real_files() -> None:
    readme = (REPO / "deploy" / "README.md").read_text()
    commands = re.findall(r"^\s*(docker (?:build|compose)[^\n#]*|kubectl apply -k \S+)", readme, flags=re.M)
    assert any("--scale code=" in c for c in commands) and any(
        c.startswith("kubectl apply -k") for c in commands
    )
    for command in commands:
        for word in shlex.split(command):
            if word.startswith(("deploy/", "./deploy/")):
                assert (REPO / word).exists(), f"README names {word}"


# ---------------------------------------------------------------- Redis, network and pod security (issue
# 37.8)


def words_after(argv: list[str], flag: str) -> str:
    assert flag in argv, f"{flag} missing from {argv}"
    return argv[argv.index(flag) + 1]


def test_compose_redis_needs_a_password_caps_its_memory_and_never_evicts() -> None:
    stack = compose()
    redis, common = stack["services"]["redis"], stack["x-common-env"]
    required = "${CORRGRPO_REDIS_PASSWORD:?"  # compose refuses to start without it
    assert words_after(redis["command"], "--requirepass").startswith(required)
    assert redis["environment"]["REDISCLI_AUTH"].startswith(required)  # the healthcheck's redis-cli
    assert words_after(redis["command"], "--maxmemory") == "${CORRGRPO_REDIS_MAXMEMORY:-1gb}"
    assert words_after(redis["command"], "--maxmemory-policy") == "noeviction"
    assert common["CORRGRPO_REDIS_PASSWORD"].startswith(required)
    assert common["CORRGRPO_STORE_SECRET"].startswith("${CORRGRPO_STORE_SECRET:?")
    assert "@" not in common["CORRGRPO_REDIS_URL"], "the password comes from its own variable"


def compose_redis_argv(variables: dict[str, str]) -> list[str]:
    """compose's Redis command with `${NAME:-default}` / `${NAME:?message}` interpolated from `variables`."""
    interpolate = lambda word: re.sub(r"\$\{(\w+):[-?]([^}]*)\}", lambda m: variables.get(m[1], m[2]), word)  # noqa: E731
    return [interpolate(word) for word in compose()["services"]["redis"]["command"]]


async def test_compose_redis_command_runs_and_admits_only_the_password(tmp_path: Path) -> None:
    """The compose file's own Redis command on a real redis-server: the services' store gets in with
    CORRGRPO_REDIS_PASSWORD, a client without it is refused, the healthcheck's redis-cli answers with
    REDISCLI_AUTH."""
    from corrgrpo_common.store.errors import StoreUnavailable
    from corrgrpo_common.store.redis_store import RedisStore

    if shutil.which("redis-server") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("redis-server is not installed")
        pytest.skip("redis-server is not installed")
    password, port = "compose-test-password", servers.free_port()
    argv = compose_redis_argv({"CORRGRPO_REDIS_PASSWORD": password})
    argv += ["--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path), "--appendonly", "no"]
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url, secret = f"redis://127.0.0.1:{port}/0", "s" * 16
    store, anonymous = RedisStore(url, secret=secret, password=password), RedisStore(url, secret=secret)
    try:
        for _ in range(200):
            try:
                await store.ping()
                break
            except StoreUnavailable:
                await asyncio.sleep(0.05)
        await store.set("k", b"v")
        assert await store.get("k") == b"v"
        with pytest.raises(StoreUnavailable, match=r"(?i)auth"):
            await anonymous.get("k")
        auth = {**os.environ, "REDISCLI_AUTH": password}

        def cli(*words: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                ["redis-cli", "-p", str(port), *words], capture_output=True, text=True, env=auth
            )

        assert cli("ping").stdout.strip() == "PONG"
        settings = cli("config", "get", "maxmemory*").stdout.split()
        assert settings[settings.index("maxmemory") + 1] == str(1 << 30)
        assert settings[settings.index("maxmemory-policy") + 1] == "noeviction"
    finally:
        await store.close()
        await anonymous.close()
        server.kill()
        server.wait(10)


def test_compose_networks_let_only_the_services_reach_redis_and_only_nginx_publish() -> None:
    stack = compose()
    services, networks = stack["services"], stack["networks"]
    assert networks["backend"]["internal"] is True
    assert services["redis"]["networks"] == ["backend"] and "ports" not in services["redis"]
    assert "networks" not in services["lb"], "nginx: the default network only, never the backend"
    assert services["trainer"]["network_mode"] == "service:lb"
    for name in SERVICES:
        assert set(services[name]["networks"]) == {"default", "backend"}
    assert stack["x-common-env"]["CORRGRPO_FORWARDED_ALLOW_IPS"] == "*"
    conf = (REPO / "deploy" / "nginx" / "nginx.conf").read_text()
    assert "proxy_set_header X-Forwarded-For $remote_addr;" in conf, (
        "a client's own X-Forwarded-For is replaced"
    )


def test_kubernetes_redis_password_comes_from_the_secret_with_maxmemory_and_noeviction() -> None:
    pod = by_kind(BASE, "Deployment")["redis"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = container["args"]
    assert words_after(args, "--requirepass") == "$(REDISCLI_AUTH)"
    (auth,) = [env for env in container["env"] if env["name"] == "REDISCLI_AUTH"]
    secret = {"name": "corrgrpo-secrets", "key": "CORRGRPO_REDIS_PASSWORD"}
    assert auth["valueFrom"]["secretKeyRef"] == secret
    assert words_after(args, "--maxmemory-policy") == "noeviction"
    maxmemory, limit = words_after(args, "--maxmemory"), container["resources"]["limits"]["memory"]
    assert re.fullmatch(r"\d+gb", maxmemory) and re.fullmatch(r"\d+Gi", limit)
    assert int(maxmemory[:-2]) < int(limit[:-2]), "room under the limit for the AOF rewrite's fork"
    (config,) = by_kind(BASE, "ConfigMap").values()
    assert "@" not in config["data"]["CORRGRPO_REDIS_URL"]
    for name in SERVICES:
        (service,) = by_kind(BASE, "Deployment")[name]["spec"]["template"]["spec"]["containers"]
        assert {"secretRef": {"name": "corrgrpo-secrets"}} in service["envFrom"], "required, not optional"


def test_kubernetes_network_policies_admit_only_the_services_to_redis_and_clients_to_the_services() -> None:
    policies, deployments = by_kind(BASE, "NetworkPolicy"), by_kind(BASE, "Deployment")
    deny = policies["default-deny-ingress"]["spec"]
    assert deny == {"podSelector": {}, "policyTypes": ["Ingress"]}
    redis = policies["redis"]["spec"]
    assert redis["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "redis"}}
    (rule,) = redis["ingress"]
    assert rule["from"] == [
        {"podSelector": {"matchLabels": {"app.kubernetes.io/component": k8s.SERVICE_COMPONENT}}}
    ]
    assert rule["ports"] == [{"protocol": "TCP", "port": "redis"}]
    carriers = {
        name
        for name, d in deployments.items()
        if d["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component")
    }
    assert carriers == set(SERVICES), "exactly the reward services' pods reach Redis"
    for name in SERVICES:
        spec = policies[name]["spec"]
        assert spec["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": name}}
        (rule,) = spec["ingress"]
        client = {"namespaceSelector": {}, "podSelector": {"matchLabels": {k8s.CLIENT_LABEL: "true"}}}
        assert rule["from"] == [client] and rule["ports"] == [{"protocol": "TCP", "port": "http"}]


def restricted_violations(pod: dict[str, Any]) -> set[str]:
    """What keeps a pod out of Pod Security `restricted`: the checks of the standard our manifests could
    fail."""
    spec, found = pod["spec"], set()
    if any(spec.get(key) for key in ("hostNetwork", "hostPID", "hostIPC")) or any(
        "hostPath" in v for v in spec["volumes"]
    ):
        found.add("host")
    for container in spec["containers"]:
        own = container.get("securityContext", {})
        merged = {**spec.get("securityContext", {}), **own}
        capabilities = own.get("capabilities", {})
        checks = {
            "privileged": own.get("privileged", False) is False,
            "allowPrivilegeEscalation": own.get("allowPrivilegeEscalation") is False,
            "capabilities": capabilities.get("drop") == ["ALL"] and not capabilities.get("add"),
            "runAsNonRoot": merged.get("runAsNonRoot") is True and merged.get("runAsUser") != 0,
            "seccomp": merged.get("seccompProfile", {}).get("type") in ("RuntimeDefault", "Localhost"),
            "appArmor": merged.get("appArmorProfile", {}).get("type") != "Unconfined",
            "procMount": own.get("procMount", "Default") == "Default",
        }
        found |= {check for check, holds in checks.items() if not holds}
    return found


def test_pod_security_levels_are_the_least_each_pod_needs() -> None:
    """Every pod meets `restricted` but the sandboxed code pod, which needs `privileged` (seccomp and AppArmor
    unconfined, an unmasked /proc: baseline forbids all three); the namespace enforces that, no-bwrap
    `restricted`."""
    sandbox_needs = {"seccomp", "appArmor", "procMount"}
    for folder, enforced, code_needs in (
        (K8S / "base", "privileged", sandbox_needs),
        (OVERLAYS[0], "restricted", set()),
    ):
        documents = k8s_documents(folder)
        (namespace,) = by_kind(documents, "Namespace").values()
        assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == enforced
        assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/audit"] == "restricted"
        for name, deployment in by_kind(documents, "Deployment").items():
            expected = code_needs if name == "code" else set()
            assert restricted_violations(deployment["spec"]["template"]) == expected, (folder.name, name)
    readme = (REPO / "deploy" / "README.md").read_text()
    assert "Pod Security" in readme and "`privileged`" in readme and "`restricted`" in readme
