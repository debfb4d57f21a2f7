"""Nothing is overwritten: a non-empty run directory is refused in one line, Ctrl-C saves what `--resume`
needs and names the command, and the resumed run continues its steps, appending to metrics.jsonl and
rollouts.jsonl. The warm-up a run trains from is keyed by what made it and recorded in run.json. Real toolcall
service, TRL and the tiny policy."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml

from corrgrpo_testing.environment import require_shared_data
from corrgrpo_testing.servers import ServiceProcess
from corrgrpo_testing.tiny_runs import cpu_config
from corrgrpo_trainer.cli import main
from corrgrpo_trainer.config import parse_config
from corrgrpo_trainer.config_shape import RLConfig, WarmupConfig
from corrgrpo_trainer.pipeline import warmup_checkpoint
from corrgrpo_trainer.rundir import METRICS, ROLLOUTS, RUN, read_jsonl

CONFIGS = Path(__file__).resolve().parents[2] / "trainer" / "configs"


def config_file(folder: Path, url: str) -> Path:
    config = cpu_config(
        "toolcall.yaml", Path("runs/a"), batch=2, generations=2
    )  # relative: the working folder
    config["dataset"] = {"path": str(require_shared_data("rlla_4k/test.parquet"))}
    config["services"]["toolcall"]["url"] = url
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "toolcall.yaml").write_text(yaml.safe_dump(config))
    return folder / "toolcall.yaml"


def test_outputs_go_under_the_working_folder_and_a_run_there_is_not_overwritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = config_file(tmp_path / "configs", "http://127.0.0.1:9")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "a").mkdir(parents=True)
    (tmp_path / "runs" / "a" / METRICS).write_text('{"step": 1}\n')
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--config", str(path)])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (
        f"python -m corrgrpo_trainer train: error: {tmp_path / 'runs' / 'a'} is not empty (a run is there): "
        f"--resume "
        "continues it, --output-dir DIR starts another\n"
    )
    assert (tmp_path / "runs" / "a" / METRICS).read_text() == '{"step": 1}\n'


def test_a_resume_that_would_drop_kept_steps_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = config_file(tmp_path / "configs", "http://127.0.0.1:9")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "a").mkdir(parents=True)
    (tmp_path / "runs" / "a" / METRICS).write_text('{"step": 1}\n')  # a run that saved no checkpoint
    with pytest.raises(SystemExit):
        main(["train", "--config", str(path), "--resume"])
    assert capsys.readouterr().err.startswith(
        f"python -m corrgrpo_trainer train: error: --resume: {tmp_path / 'runs' / 'a'} has no checkpoint, "
        f"and starting "
        "over would drop the steps the run kept"
    )
    assert (tmp_path / "runs" / "a" / METRICS).read_text() == '{"step": 1}\n'


@pytest.mark.slow
def test_ctrl_c_saves_and_resume_continues_the_steps(tmp_path: Path, toolcall: ServiceProcess) -> None:
    path = config_file(tmp_path, toolcall.url)
    argv = ["train", "--config", str(path), "--model", "tiny", "--max-steps", "200"]
    process = subprocess.Popen(
        [sys.executable, "-m", "corrgrpo_trainer", *argv],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("[train] step 1/200  reward="):
            process.send_signal(signal.SIGINT)
            break
    _out, err = process.communicate(timeout=300)
    assert process.returncode == 130, err[-3000:]
    run_dir = tmp_path / "runs" / "a"
    step = max(record["step"] for record in read_jsonl(run_dir / METRICS))
    resume = f"python -m corrgrpo_trainer {shlex.join(argv)} --resume"
    assert err.splitlines()[-1] == (
        f"python -m corrgrpo_trainer train: stopped at step {step}, saved in {run_dir}/checkpoint-{step}; "
        f"resume: {resume}"
    )
    assert "Traceback" not in err
    subprocess.run(
        [sys.executable, *shlex.split(resume)[1:], "--max-steps", str(step + 1)], cwd=tmp_path, check=True
    )
    assert [record["step"] for record in read_jsonl(run_dir / METRICS)] == list(range(1, step + 2))
    kept = [rollout["step"] for rollout in read_jsonl(run_dir / ROLLOUTS)]
    assert kept == sorted(kept) and set(kept) == set(range(1, step + 2)) and len(kept) == 2 * (step + 1)


@pytest.mark.slow
def test_a_warm_up_is_keyed_by_what_made_it_and_the_run_records_its_start(
    tmp_path: Path,
    toolcall: ServiceProcess,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    require_shared_data("rlla_4k/rlla_sft.json")
    path = config_file(tmp_path, toolcall.url)
    config = yaml.safe_load(path.read_text()) | {"warmup": str(CONFIGS / "toolcall_sft.yaml")}
    path.write_text(yaml.safe_dump(config))
    monkeypatch.chdir(tmp_path)
    small = [
        "--warmup-set",
        "dataset.limit=2",
        "--warmup-set",
        "trl.max_steps=1",
        "--warmup-set",
        "trl.report_to=none",
    ]
    for output in ("runs/a", "runs/b"):
        assert (
            main(
                [
                    "run",
                    "--config",
                    str(path),
                    "--model",
                    "tiny",
                    "--max-steps",
                    "1",
                    "--output-dir",
                    output,
                    *small,
                ]
            )
            == 0
        )
    [warmup] = (tmp_path / "runs" / "warmups").iterdir()  # one warm-up, under the runs' root, made once
    assert (
        capsys.readouterr().out.count(
            f"[run] warm-up: {warmup} (made of this model, data and settings before: reused)"
        )
        == 1
    )
    starts = [json.loads((tmp_path / "runs" / run / RUN).read_text())["start"] for run in ("a", "b")]
    assert starts[0] == starts[1] and starts[0]["path"] == str(warmup) and len(starts[0]["sha256"]) == 64
    resolved = yaml.safe_load((tmp_path / "runs" / "a" / "warmup.resolved.yaml").read_text())
    assert resolved["model"] == "tiny" and resolved["trl"]["output_dir"] == str(warmup)


def test_the_warm_up_key_changes_with_the_model_the_data_and_the_settings(tmp_path: Path) -> None:
    data = tmp_path / "demonstrations.json"
    data.write_text("[]")
    raw = {
        "domain": "toolcall",
        "model": "tiny",
        "dataset": {"path": str(data)},
        "trl": {"learning_rate": 1e-4},
    }
    warmup = typing.cast(WarmupConfig, parse_config(raw, "warmup"))

    def rl(run: str) -> RLConfig:
        services = {"toolcall": {"url": "http://127.0.0.1:1"}}
        rl = {"domain": "toolcall", "dataset": {"path": str(data)}, "services": services, "run_dir": run}
        return typing.cast(RLConfig, parse_config(rl))

    def changed(**update: Any) -> WarmupConfig:
        return warmup.model_copy(update=update)

    config = rl(str(tmp_path / "runs" / "a"))
    key = warmup_checkpoint(config, warmup)
    assert key.parent == tmp_path / "runs" / "warmups" and key.name.startswith("toolcall-")
    assert warmup_checkpoint(rl(str(tmp_path / "runs" / "b")), warmup) == key  # another run, same warm-up
    assert warmup_checkpoint(config, changed(trl={"learning_rate": 1e-4, "report_to": "none"})) == key
    assert warmup_checkpoint(config, changed(model="smollm2-135m-instruct")) != key
    assert warmup_checkpoint(config, changed(trl={"learning_rate": 2e-4})) != key
    data.write_text('[{"instruction": "", "input": "", "output": ""}]')  # the same file name, other rows
    assert warmup_checkpoint(config, warmup) != key


def test_a_resumed_run_keeps_the_start_evaluation_it_made(
    tmp_path: Path,
    toolcall: ServiceProcess,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = config_file(tmp_path, toolcall.url)
    config = yaml.safe_load(path.read_text())
    config["evaluation"] = {"path": config["dataset"]["path"], "limit": 2}
    config["trl"] |= {"save_strategy": "steps", "save_steps": 1}  # what --resume continues from
    path.write_text(yaml.safe_dump(config))
    monkeypatch.chdir(tmp_path)
    argv = ["run", "--config", str(path), "--model", "tiny", "--max-steps", "1"]
    assert main(argv) == 0
    first = capsys.readouterr().out
    start = tmp_path / "runs" / "a" / "evaluation_start.json"
    assert first.index("[run] evaluation: ") < first.index("[train] step 1/1") and start.is_file()
    start.write_text(json.dumps({"format": 0.123}))  # what the first attempt measured, to be kept
    assert main([*argv, "--resume"]) == 0
    again = capsys.readouterr().out
    assert again.count("[eval] ") == 1 and json.loads(start.read_text()) == {"format": 0.123}
    trained = json.loads((tmp_path / "runs" / "a" / "evaluation.json").read_text())["format"]
    assert f"[run] held-out {'format':<16} {0.123:>8.3f} {trained:>8.3f}" in again.splitlines()
