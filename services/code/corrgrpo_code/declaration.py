"""The code service, declared once: name, version, port, components, settings, app, example, deployment."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from importlib.metadata import version
from typing import Any

from corrgrpo_common.registry import Deploy, Resources, ServiceDeclaration
from corrgrpo_proto import ComponentSpec

from .settings import CodeSettings


def _component(weight: float, description: str) -> Any:
    return field(default=0.0, metadata={"weight": weight, "description": description})


@dataclass
class Components:
    """An item's reward components, each in [0, 1]. Weights: the authors' (CorrGRPO code_rl/run.sh); `total`
    is their weighted sum, unnormalised. A gated component (no reference, not correct) is 0."""

    format: float = _component(0.05, "a fenced block, and the code holds `class Solution`/`def f(`")
    syntax: float = _component(0.05, "the extracted code parses")
    compile: float = _component(0.05, "requires syntax; prelude + code compile")
    runtime: float = _component(0.25, "requires compile; ran with no error but a failed assertion")
    correct: float = _component(0.60, "requires runtime; every test passes")
    ast_similarity: float = _component(
        0.30, "SequenceMatcher ratio of the node-type sequences of code and reference (0 without a reference)"
    )
    efficiency: float = _component(
        0.20,
        "correct only: clip(1 - t / t_ref, 0, 1); `calibrated`: t / t_ref an upper bound from paired runs",
    )
    pass_rate: float = _component(0.0, "requires compile; share of the tests/cases passed")


COMPONENTS = tuple(
    ComponentSpec(
        name=f.name, min=0, max=1, weight=f.metadata["weight"], description=f.metadata["description"]
    )
    for f in fields(Components)
)


ADD = {
    "task_id": "example/add",
    "entry_point": "add",
    "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n",
    "reference": "def add(a, b):\n    return a + b\n",
}


def example(completion: str | None = None) -> dict[str, Any]:
    """An inline problem (no dataset loaded). The right answer runs one sandboxed test, a text without `def
    add(` none."""
    return {
        "completion": "```python\ndef add(a, b):\n    return a + b\n```"
        if completion is None
        else completion,
        "problem": ADD,
    }


SERVICE = ServiceDeclaration(
    name="code",
    version=version("corrgrpo-code"),
    port=8101,
    components=COMPONENTS,
    settings=CodeSettings,
    app="corrgrpo_code.app:build",
    example=example,
    deploy=Deploy(
        Resources(
            cpu_request=1, memory_request_mib=1024, cpu_limit=2, memory_limit_mib=4096, peak_rss_mib=768
        ),
        env={
            "CORRGRPO_CODE_WORKERS": "2",
            # unsafe-none runs candidates unisolated (trusted code only). The overlay no-bwrap replaces this
            # entry.
            "CORRGRPO_CODE_ISOLATION": "bwrap",
            # humaneval ships in the image; e.g.
            # leetcode:/shared/data/leetcode/LeetCodeDataset-v0.3.1-test.jsonl.gz
            "CORRGRPO_CODE_DATASETS": "humaneval",
            "HF_HOME": "/tmp/huggingface",
        },
        build_args={"LOCAL_PARTS": "sandbox", "APT_PACKAGES": "bubblewrap=0.8.0-2+deb12u1"},
        bubblewrap=True,
        shared_data=True,
        autoscale=(2, 16),
        workers_setting="code_workers",
    ),
)
