"""The parts of examples/demo.py (the whole `make demo` takes minutes and runs as its own target)."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from corrgrpo_testing.servers import start_service
from corrgrpo_trainer.report import report
from corrgrpo_trainer.rescore import rescore

# The demo is a script (examples/demo.py), not a package: loaded from its file.
_spec = importlib.util.spec_from_file_location(
    "demo", Path(__file__).resolve().parents[2] / "examples" / "demo.py"
)
assert _spec and _spec.loader
demo = importlib.util.module_from_spec(_spec)
sys.modules["demo"] = demo  # dataclasses resolve their module by name
_spec.loader.exec_module(demo)


def test_code_groups_hold_the_canonical_solution_and_one_perturbation_per_stage() -> None:
    groups = demo.code_groups()
    assert len(groups) == len(demo.HUMANEVAL_TASKS)
    for group in groups:
        assert group.labels == ["canonical", "unfenced", "wrong", "crash", "syntax"]
        canonical = group.items[0]
        assert canonical["completion"] == f"```python\n{canonical['problem']['reference']}```"
        assert len({item["completion"] for item in group.items}) == len(group.items)


def test_toolcall_variants_break_different_components() -> None:
    variants = demo.tool_variants([{"name": "f", "parameters": {"a": 1, "b": 2}}])
    assert variants["exact"].startswith("<think>") and not variants["no_think"].startswith("<think>")
    assert '"a": "somewhere else"' in variants["wrong_value"] and '"parameters": {}' in variants["no_params"]
    assert not variants["bad_json"].endswith("</tool_call>")


@pytest.mark.slow
def test_toolcall_groups_scored_by_the_live_service_rank_right_above_wrong(tmp_path: Path) -> None:
    with start_service("toolcall") as service:
        scored = asyncio.run(demo.score_groups(service.url, demo.toolcall_groups()))
    assert scored.names == ["format", "name", "param_names", "param_values"]
    assert scored.rewards.shape == (len(demo.TOOL_CASES), 6, 4) and not scored.rewards.isnan().any()
    # ToolRL's correctness: exact → 3, wrong tool or bad JSON → −3
    correctness = scored.rewards[..., 1:].sum(-1)
    labels = scored.groups[0].labels
    assert torch.allclose(correctness[:, labels.index("exact")], torch.tensor(3.0, dtype=torch.float64))
    assert torch.allclose(correctness[:, labels.index("wrong_tool")], torch.tensor(-3.0, dtype=torch.float64))
    advantages = demo.estimator_advantages(scored)
    assert set(advantages) == {"GRPO", "GDPO", "CorrGRPO"}
    for values in advantages.values():
        assert (
            values.shape == (3, 6)
            and (values[:, labels.index("exact")] > values[:, labels.index("bad_json")]).all()
        )
    demo.plot(tmp_path / "demo.png", None, {"toolcall": scored}, {"toolcall": advantages})
    assert (tmp_path / "demo.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_summary_names_the_files_and_says_when_the_sandbox_is_unknown() -> None:
    text = demo.summary(None, trained=True)
    assert (
        "zero_std_groups=" in text and "|A|=" in text and "unknown (the code service did not start)" in text
    )
    assert str(demo.OUT / "train" / "metrics.jsonl") in text and str(demo.OUT / "demo.png") in text


@pytest.mark.slow
def test_the_demo_run_is_one_rescore_and_report_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the demo writes demo_out/ under the working folder
    with start_service("code") as service:
        history = demo.train_policy(service.url, "tiny")
        summary = rescore(demo.OUT / "train")
    assert [entry["step"] for entry in history if "reward" in entry] == list(range(1, demo.TRAIN_STEPS + 1))
    assert summary["rollouts"] == demo.TRAIN_STEPS * 8 and summary["services"] == {"code": service.url}
    assert "rewards.png" in [path.name for path in report(demo.OUT / "train")]
