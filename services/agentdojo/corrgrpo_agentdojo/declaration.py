"""The AgentDojo episode service, declared once: name, version, port, components, settings, app, example item,
deployment."""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

from corrgrpo_common.registry import Deploy, Resources, ServiceDeclaration
from corrgrpo_proto import ComponentSpec

from .settings import AgentDojoSettings

COMPONENTS = (
    ComponentSpec(
        name="utility",
        min=0,
        max=1,
        description="the user task's checker passed (0 if the trajectory is invalid)",
    ),
    ComponentSpec(
        name="security",
        min=0,
        max=1,
        description="the injection task's goal was NOT achieved (0 without an injection task or if the "
        "trajectory is invalid)",
    ),
)


def example(completion: str | None = None) -> dict[str, Any]:
    """A trajectory of banking's first user task: the final answer alone (no tool call), replayed and
    checked."""
    return {"suite": "banking", "user_task": "user_task_0", "final_answer": completion or ""}


SERVICE = ServiceDeclaration(
    name="agentdojo",
    version=version("corrgrpo-agentdojo"),
    port=8103,
    components=COMPONENTS,
    settings=AgentDojoSettings,
    app="corrgrpo_agentdojo.app:build",
    example=example,
    # Start-up loads and probes every suite (~1 min on a busy CPU).
    deploy=Deploy(
        Resources(
            cpu_request=0.5, memory_request_mib=1024, cpu_limit=2, memory_limit_mib=2048, peak_rss_mib=1024
        ),
        startup_s=120,
    ),
)
