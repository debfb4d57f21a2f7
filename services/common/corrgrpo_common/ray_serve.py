"""The services as Ray Serve deployments: `import_path: corrgrpo_common.ray_serve:application`, `args:
{service: NAME}`.

Each replica builds, inside itself, the app `python -m corrgrpo_<name>` serves (`ServiceDeclaration.build`):
the same routes, guards and store (the connection limits of `run_server` aside: Serve's proxy owns the
sockets, as /readyz's `connections` says), nothing per engine but three things. The declared worker setting
is sized to the CPUs Ray granted the replica (its `num_cpus`, rounded up) unless its variable is set: the
node's CPU count would start a pool per replica as large as the whole machine. A replica without
`CORRGRPO_REDIS_URL` refuses to start: replicas on several nodes share idempotency, caches and episodes only
through Redis. Every response names the node and the replica that answered (`x-corrgrpo-node`,
`x-corrgrpo-replica`). deploy/ray/serve.yaml (corrgrpo_devtools.ray_config) holds the options. Needs the
`ray` extra (`ray[serve]`), which the images and the default install leave out. Serve's proxy keeps an
application's route prefix (`/code`) in the request's path and names it in `root_path`: the guards decide on
the route less that prefix (`guards.auth.route_path`), as the router does.
"""

from __future__ import annotations

import gc
import math
from typing import Any

import ray
from fastapi import FastAPI
from pydantic import ValidationError
from ray import serve
from ray.serve import Application
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .logs import configure
from .registry import ServiceDeclaration, declared
from .settings import ServiceSettings, refusal

NODE_HEADER = "x-corrgrpo-node"
REPLICA_HEADER = "x-corrgrpo-replica"
PROXY_OWNED = (
    "Serve's proxy, not the service: slow-client timeouts, connection caps, framing checks; it reads "
    "a body whole before the replica can refuse it (413, 429)"
)


async def proxy_owned() -> str:
    """/readyz's `connections` under Serve: what `run_server`'s guards do, Serve's proxy does its own way."""
    return PROXY_OWNED


class ReplicaLabels:
    """ASGI middleware: each response's headers name the node and the replica."""

    def __init__(self, app: ASGIApp, node: str, replica: str) -> None:
        self.app = app
        self.labels = [(NODE_HEADER.encode(), node.encode()), (REPLICA_HEADER.encode(), replica.encode())]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def labelled(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *self.labels]
            await send(message)

        await self.app(scope, receive, labelled)


def replica_settings(service: ServiceDeclaration, cpus: float) -> ServiceSettings:
    """The service's settings from the environment, its worker setting sized to `cpus` unless set there;
    raises, in one line, on settings the service refuses (an empty `CORRGRPO_API_TOKEN`) and without Redis."""
    try:
        settings = service.settings()
    except ValidationError as error:
        raise RuntimeError(f"{service.name}: {refusal(service.settings, error)}") from None
    if settings.redis_url is None:
        raise RuntimeError(
            f"{service.name}: CORRGRPO_REDIS_URL is not set. Serve replicas on several nodes share "
            f"idempotency, caches "
            "and episodes only through Redis: set it (and CORRGRPO_STORE_SECRET) where `ray start` runs on "
            "every node"
        )
    setting = service.deploy.workers_setting
    # from the environment when it is set there
    if setting is not None and setting not in settings.model_fields_set:
        settings = settings.model_copy(update={setting: max(1, math.ceil(cpus))})
    return settings


@serve.ingress()
class ServiceReplica:
    """One replica of a declared service. The app is built at replica start, never pickled from the driver."""

    def __init__(self, service: str) -> None:
        self.service = declared()[service]

    def __serve_build_asgi_app__(self) -> FastAPI:
        context = ray.get_runtime_context()
        settings = replica_settings(self.service, context.get_assigned_resources().get("CPU", 1.0))
        configure(settings.log_level, settings.log_json)
        app = self.service.build(settings)
        app.state.readiness["connections"] = proxy_owned
        replica = serve.get_replica_context().replica_id.unique_id
        app.add_middleware(ReplicaLabels, node=context.get_node_id(), replica=replica)
        # start-up's survivors out of the collector's sight, as `run_server` does (connections.py)
        gc.collect()
        gc.freeze()
        return app


def application(args: dict[str, Any]) -> Application:
    """Serve's application builder: a deployment named after `args["service"]` (its options: serve.yaml)."""
    name = args["service"]
    if name not in declared():
        raise ValueError(f"unknown service {name!r}; declared: {', '.join(declared())}")
    return serve.deployment(name=name)(ServiceReplica).bind(name)
