"""The code service, declared once: name, version, port, components, settings, app, example item, deployment."""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

from corrgrpo_common.registry import Deploy, Resources, ServiceDeclaration
from corrgrpo_proto import ComponentSpec

from .settings import CodeSettings

# The authors' default weights (CorrGRPO code_rl/run.sh); `total` is their weighted sum, unnormalised. Their gating:
# ast_similarity counts only where a reference exists, efficiency only for correct programs; a gated component is 0.
COMPONENTS = (
    ComponentSpec(
        name="format", min=0, max=1, weight=0.05, description="a fenced block, and the code holds `class Solution`/`def f(`"
    ),
    ComponentSpec(name="syntax", min=0, max=1, weight=0.05, description="the extracted code parses"),
    ComponentSpec(name="compile", min=0, max=1, weight=0.05, description="requires syntax; prelude + code compile"),
    ComponentSpec(
        name="runtime", min=0, max=1, weight=0.25, description="requires compile; ran with no error but a failed assertion"
    ),
    ComponentSpec(name="correct", min=0, max=1, weight=0.60, description="requires runtime; every test passes"),
    ComponentSpec(
        name="ast_similarity",
        min=0,
        max=1,
        weight=0.30,
        description="SequenceMatcher ratio of the node-type sequences of code and reference (0 without a reference)",
    ),
    ComponentSpec(
        name="efficiency",
        min=0,
        max=1,
        weight=0.20,
        description="correct only: clip(1 - t / t_ref, 0, 1); `calibrated`: t / t_ref an upper bound from paired runs",
    ),
    ComponentSpec(name="pass_rate", min=0, max=1, weight=0.0, description="requires compile; share of the tests/cases passed"),
)

ADD = {
    "task_id": "example/add",
    "entry_point": "add",
    "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n",
    "reference": "def add(a, b):\n    return a + b\n",
}


def example(completion: str | None = None) -> dict[str, Any]:
    """An inline problem (no dataset loaded); the right answer runs one sandboxed test, a text without `def add(` none."""
    return {
        "completion": "```python\ndef add(a, b):\n    return a + b\n```" if completion is None else completion,
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
        Resources(cpu_request=1, memory_request_mib=1024, cpu_limit=2, memory_limit_mib=4096, peak_rss_mib=768),
        env={
            "CORRGRPO_CODE_WORKERS": "2",
            # unsafe-none runs candidates unisolated (trusted code only); the overlay no-bwrap replaces this entry.
            "CORRGRPO_CODE_ISOLATION": "bwrap",
            # humaneval ships in the image; e.g. leetcode:/shared/data/leetcode/LeetCodeDataset-v0.3.1-test.jsonl.gz
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
