"""`rescore RUN_DIR`: kept rollouts sent to the live service again; a value that differs from the kept one is
counted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from corrgrpo_proto import RewardClient
from corrgrpo_testing.servers import ServiceProcess
from corrgrpo_trainer.cli import main
from corrgrpo_trainer.rescore import changed
from corrgrpo_trainer.rundir import RESOLVED_CONFIG, ROLLOUTS, RolloutWriter

COMPONENTS = ["format", "name", "param_names", "param_values"]
CALL = '<think>x</think>\n<tool_call>\n{{"name": "{}", "parameters": {{"city": "Paris"}}}}\n</tool_call>'
TRUTH = CALL.format("get_weather")
COMPLETIONS = [TRUTH, CALL.format("get_time"), "no call at all", TRUTH]


@pytest.fixture
def run_dir(tmp_path: Path, toolcall: ServiceProcess) -> Path:
    """A run directory as training leaves it: one group of 4 rollouts, kept with the values the service
    gave."""
    rows = [{"prompt": [{"role": "user", "content": "Weather in Paris?"}], "ground_truth": TRUTH}] * 4
    with RewardClient(toolcall.url) as client:
        results = client.score([{"completion": c, "ground_truth": TRUTH} for c in COMPLETIONS])
    rewards = [[r.components[name] for name in COMPONENTS] for r in results]
    writer = RolloutWriter(tmp_path, COMPONENTS, [1.0] * 4, "corrgrpo", group=4)
    writer.write(
        1, rows, COMPLETIONS, rewards, [0.0] * 4, {"stage/toolcall": [r.info.get("stage") for r in results]}
    )
    config = {"domain": "toolcall", "services": {"toolcall": {"url": toolcall.url, "components": COMPONENTS}}}
    (tmp_path / RESOLVED_CONFIG).write_text(yaml.safe_dump(config))
    return tmp_path


def test_unchanged_rewards_count_zero_and_exit_0(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rescore", str(run_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("[rescore] 4 rollouts sent again to toolcall at http://127.0.0.1:")
    assert [line.split() for line in lines[2:]] == [[c, "0", "4"] for c in [*COMPONENTS, "stage/toolcall"]]


def test_a_changed_value_is_counted_and_written(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rollouts = [json.loads(line) for line in (run_dir / ROLLOUTS).read_text().splitlines()]
    kept = rollouts[1]["components"]["name"]
    rollouts[1]["components"]["name"] = kept + 0.25  # as if the past grader had scored it otherwise
    (run_dir / ROLLOUTS).write_text("".join(json.dumps(r) + "\n" for r in rollouts))
    assert main(["rescore", str(run_dir)]) == 1
    table = {line.split()[0]: line.split()[1] for line in capsys.readouterr().out.splitlines()[2:]}
    assert table == {
        "format": "0",
        "name": "1",
        "param_names": "0",
        "param_values": "0",
        "stage/toolcall": "0",
    }
    summary = json.loads((run_dir / "rescore.json").read_text())
    assert summary["changes"] == [
        {
            "step": 1,
            "group": 0,
            "prompt_id": rollouts[1]["prompt_id"],
            "column": "name",
            "before": kept + 0.25,
            "after": kept,
        }
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--url", "toolcall"], "--url: expected NAME=URL, e.g. --url code=http://127.0.0.1:9101"),
        (["--url", "code=http://127.0.0.1:1"], "--url code: the run's services are toolcall"),
    ],
)
def test_a_wrong_url_is_one_line_and_exit_2(
    run_dir: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["rescore", str(run_dir), *args])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == f"python -m corrgrpo_trainer rescore: error: {message}\n"


def test_agentdojo_runs_are_refused_in_one_line(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (run_dir / RESOLVED_CONFIG).write_text(yaml.safe_dump({"domain": "agentdojo", "services": {}}))
    with pytest.raises(SystemExit):
        main(["rescore", str(run_dir)])
    assert "AgentDojo rollouts are multi-turn episodes" in capsys.readouterr().err


def test_values_are_compared_at_the_float32_precision_they_were_kept_in() -> None:
    served = (
        0.32642487046632124  # an ast_similarity a real run kept as 0.32642486691474915 (TRL's float32 tensor)
    )
    assert not changed(0.32642486691474915, served)
    assert changed(0.3264249, served) and changed(None, served) and changed("runtime", "format")
