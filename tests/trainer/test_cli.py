"""`python -m corrgrpo_trainer` (advantages on JSON files, hostile ones too; the config files; the
per-component table; the service check before a model loads), and every command line's help."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
import torch
import yaml

from corrgrpo_testing.environment import require_shared_data
from corrgrpo_testing.servers import free_port, start_service
from corrgrpo_testing.tiny_runs import cpu_config
from corrgrpo_trainer.advantages import ESTIMATORS, corrgrpo, gdpo
from corrgrpo_trainer.cli import COMMANDS, build_parser, main
from corrgrpo_trainer.config import InputError, ServicesDown
from corrgrpo_trainer.config_shape import Service
from corrgrpo_trainer.data import DATA_DIR_ENV
from corrgrpo_trainer.progress import component_table
from corrgrpo_trainer.reward_json import advantages_report
from corrgrpo_trainer.rewards import check_services
from corrgrpo_trainer.train import nothing_learned

REWARDS = [[[1.0, 0.5], [0.0, 0.1], [1.0, None]], [[0.0, 0.0], [1.0, 1.0], [0.5, 0.2]]]
CONFIGS = Path(__file__).resolve().parents[2] / "trainer" / "configs"


@pytest.fixture(autouse=True)
def in_a_working_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs write under the working folder: each test its own, never the clone (a run there refuses the
    next)."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)


def as_tensor(nested: list) -> torch.Tensor:
    return torch.tensor(
        [[[float("nan") if v is None else v for v in g] for g in b] for b in nested], dtype=torch.float64
    )


def test_advantages_command_on_a_nested_list(tmp_path: Path) -> None:
    source = tmp_path / "rewards.json"
    source.write_text(json.dumps(REWARDS))
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "corrgrpo_trainer",
            "advantages",
            "--input",
            str(source),
            "--estimator",
            "all",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    answer = json.loads(run.stdout)
    assert answer["shape"] == [2, 3, 2] and set(answer["advantages"]) == set(ESTIMATORS)
    expected = corrgrpo(as_tensor(REWARDS))
    assert torch.allclose(torch.tensor(answer["advantages"]["corrgrpo"], dtype=torch.float64), expected)
    assert "corrgrpo/scale_mean" in answer["diagnostics"]


def test_weights_fold_into_r_and_gdpo_applies_them_to_z_scores(tmp_path: Path) -> None:
    source, output = tmp_path / "in.json", tmp_path / "out.json"
    source.write_text(json.dumps({"rewards": REWARDS, "weights": {"pass": 2.0, "style": -1.0}}))
    assert main(["advantages", "--input", str(source), "--estimator", "all", "--output", str(output)]) == 0
    answer = json.loads(output.read_text())
    rewards = as_tensor(REWARDS)
    folded = rewards * torch.tensor([2.0, -1.0], dtype=torch.float64)
    assert torch.allclose(
        torch.tensor(answer["advantages"]["corrgrpo"], dtype=torch.float64), corrgrpo(folded)
    )
    assert torch.allclose(
        torch.tensor(answer["advantages"]["gdpo"], dtype=torch.float64), gdpo(rewards, weights=[2.0, -1.0])
    )
    assert "grpo/var_share/style" in answer["diagnostics"]


def test_undefined_numbers_are_null_so_the_output_is_strict_json(tmp_path: Path) -> None:
    source, output = tmp_path / "in.json", tmp_path / "out.json"
    # two anti-correlated components: Σρ = 0, shares 0/0
    source.write_text(json.dumps([[[1.0, 2.0], [3.0, 1.0]]]))
    assert main(["advantages", "--input", str(source), "--estimator", "all", "--output", str(output)]) == 0
    answer = json.loads(output.read_text(), parse_constant=lambda name: pytest.fail(f"{name} is not JSON"))
    assert answer["diagnostics"]["corrgrpo/share/0"] is None
    assert answer["advantages"]["grpo"][0][0] < 0 < answer["advantages"]["grpo"][0][1]


def test_mismatched_weights_are_refused() -> None:
    with pytest.raises(InputError, match="3 weights for K = 2"):
        advantages_report({"rewards": REWARDS, "weights": [1, 1, 1]}, ["grpo"])


def test_component_table_lists_each_logged_step() -> None:
    history = [
        {"step": 1, "reward": 0.5, "rewards/format/mean": 1.0},
        {"loss": 0.1},
        {"step": 2, "reward": 0.25},
    ]
    lines = component_table(history, ["format"]).splitlines()
    assert lines[0].split() == ["step", "format", "reward"]
    assert lines[1].split() == ["1", "1.0000", "0.5000"] and lines[2].split() == ["2", "nan", "0.2500"]


@pytest.mark.parametrize("domain", ["code", "toolcall", "agentdojo"])
def test_configs_name_their_domain_service_and_a_known_estimator(domain: str) -> None:
    config = yaml.safe_load((CONFIGS / f"{domain}.yaml").read_text())
    assert config["domain"] == domain and domain in config["services"]
    assert config["estimator"] in ESTIMATORS and config["trl"]["output_dir"]


@pytest.mark.slow
def test_train_command_runs_the_tiny_policy_against_the_live_toolcall_service(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = require_shared_data("rlla_4k/test.parquet")
    config = cpu_config("toolcall.yaml", tmp_path / "out", batch=2, generations=2, max_completion_length=8)
    config["dataset"] = {"path": str(data), "limit": 4}
    with start_service("toolcall") as service:
        config["services"]["toolcall"]["url"] = service.url
        (tmp_path / "toolcall.yaml").write_text(yaml.safe_dump(config))
        assert (
            main(
                ["train", "--config", str(tmp_path / "toolcall.yaml"), "--model", "tiny", "--max-steps", "1"]
            )
            == 0
        )
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert "attempting to log a value of" not in captured.out + captured.err  # no diagnostic logged as None
    progress = [line for line in lines if line.startswith("[train] step 1/1  ")]
    assert len(progress) == 1 and all(
        f"{name}=" in progress[0] for name in ("format", "name", "param_names", "param_values")
    )
    assert nothing_learned(1) in lines  # the random policy: every group the same
    assert lines[-3].split() == ["step", "format", "name", "param_names", "param_values", "reward"]
    assert lines[-2].split()[0] == "1" and len(lines[-2].split()) == 6
    [step] = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert step["step"] == 1 and step["rewards/format/mean"] == 0.0 and step["model/params"] < 100_000
    # the random policy: nothing varies
    assert step["frac_reward_zero_std"] == 1.0 and step["advantages/abs_mean"] == 0.0
    # undefined without variance: left out
    assert "corrgrpo/scale_mean" not in step and None not in step.values()
    resolved = yaml.safe_load((tmp_path / "out" / "config.resolved.yaml").read_text())
    assert (
        resolved["model"] == "tiny"
        and resolved["trl"]["max_steps"] == 1
        and resolved["dataset"]["offset"] == 0
    )


def run_configs(tmp_path: Path, url: str) -> Path:
    """The shipped tool-call RL config and its warm-up, shrunk to the tiny policy, in tmp_path/configs."""
    folder = tmp_path / "configs"
    folder.mkdir()
    rl = yaml.safe_load((CONFIGS / "toolcall.yaml").read_text())
    rl["services"]["toolcall"]["url"] = url
    rl["dataset"]["limit"], rl["evaluation"]["limit"] = 2, 2
    rl["trl"] |= {"output_dir": "run", "per_device_train_batch_size": 2, "num_generations": 2, "max_steps": 1}
    rl["trl"] |= {"max_completion_length": 8, "gradient_checkpointing": False, "use_cpu": True}
    warmup = yaml.safe_load((CONFIGS / "toolcall_sft.yaml").read_text())
    warmup["trl"] |= {"max_length": 8192, "gradient_accumulation_steps": 2, "use_cpu": True}
    (folder / "toolcall.yaml").write_text(yaml.safe_dump(rl))
    (folder / "toolcall_sft.yaml").write_text(yaml.safe_dump(warmup))
    return folder / "toolcall.yaml"


@pytest.mark.slow
def test_run_warms_up_trains_and_evaluates_under_the_working_folder_and_reuses_the_same_warm_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = require_shared_data("rlla_4k/test.parquet").parents[1]
    # the shipped public sources, read from their local copies
    monkeypatch.setenv(DATA_DIR_ENV, str(data_dir))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # outputs go here, not beside the config
    small = ["--model", "tiny", "--warmup-set", "dataset.limit=2"]
    with start_service("toolcall") as service:
        config = run_configs(tmp_path, service.url)
        assert main(["run", "--config", str(config), *small]) == 0
        first = capsys.readouterr().out
        assert (
            main(["run", "--config", str(config), *small, "--set", "estimator=grpo", "--output-dir", "run2"])
            == 0
        )
        second = capsys.readouterr().out
    run, [warm] = elsewhere / "run", list((elsewhere / "warmups").iterdir())
    assert "[sft] step 1/1" in first and (warm / "config.json").is_file()
    assert "[train] step 1/1  " in first and nothing_learned(1) in first.splitlines()
    evaluation = json.loads((run / "evaluation.json").read_text())
    assert set(evaluation) == {"format", "name", "param_names", "param_values", "reward"}
    assert f"[eval] 2 held-out rows: format={evaluation['format']:.3f}" in first
    start = json.loads((run / "evaluation_start.json").read_text())  # the warm-up's weights, before RL
    assert set(start) == set(evaluation)
    assert first.index("[run] evaluation: ") < first.index("[train] step 1/1")
    row = f"[run] held-out {'format':<16} {start['format']:>8.3f} {evaluation['format']:>8.3f}"
    assert row in first.splitlines()
    assert (run / "policy" / "config.json").is_file() and (run / "metrics.jsonl").is_file()
    assert f"[run] warm-up: {warm} (made of this model, data and settings before: reused)" in second
    assert "[sft] step" not in second and "[train] step 1/1  " in second
    resolved = yaml.safe_load((elsewhere / "run2" / "config.resolved.yaml").read_text())
    assert (
        resolved["estimator"] == "grpo"
        and resolved["run_dir"] == str(elsewhere / "run2")
        and resolved["model"] == "tiny"
    )
    assert sorted(path.name for path in config.parent.iterdir()) == ["toolcall.yaml", "toolcall_sft.yaml"]


def test_a_component_the_service_does_not_serve_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with start_service("toolcall") as service:
        config, _ = unreachable_config(tmp_path, "toolcall")
        with pytest.raises(SystemExit) as exit_:
            main(
                [
                    "train",
                    "--config",
                    str(config),
                    "--set",
                    f"services.toolcall.url={service.url}",
                    "--set",
                    "services.toolcall.components=[format, nmae]",
                    "--model",
                    str(tmp_path / "no-model"),
                ]
            )
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (
        f"python -m corrgrpo_trainer train: error: services.toolcall.components: 'nmae' is not a component "
        f"of the "
        f"toolcall service at {service.url}; did you mean 'name'? (it has format, name, param_names, "
        f"param_values)\n"
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[[[1, 2], [3]]]", "rewards[0][1]: 1 components, the first had 2 (ragged)"),
        ("[[1, 2]]", "rewards[0][0]: expected a non-empty list of components"),
        ('[[["a", 1]]]', 'rewards[0][0][0]: expected a number or null, got "a"'),
        ("{bad", "is not JSON"),
        ('{"weights": [1]}', 'an object with "rewards"'),
        ('{"rewards": [[[1], [2]]], "weights": {"a": "x"}}', "weights[0]: expected a number"),
    ],
)
def test_malformed_advantages_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    source = tmp_path / "in.json"
    source.write_text(content)
    with pytest.raises(SystemExit) as exit_:
        main(["advantages", "--input", str(source)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err and err.count("\n") == 1, err


def test_a_missing_input_file_is_one_line_and_exit_2() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "corrgrpo_trainer", "advantages", "--input", "/no/such/file.json"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert (
        run.stderr.strip()
        == "python -m corrgrpo_trainer advantages: error: cannot read /no/such/file.json: No such file or "
        "directory"
    )


def test_help_describes_every_command_and_every_option_with_its_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = build_parser()
    top = " ".join(parser.format_help().split())
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in commands.choices.items():
        assert (
            name in top and COMMANDS[name].help in top.replace("\n", " ").replace("  ", " ")
        ) or name in top
        for action in sub._actions:
            if action.dest == "help" or not action.option_strings:  # a positional is required by itself
                continue
            assert action.help, f"{name} {action.option_strings} has no help"
            assert "default" in action.help or "required" in action.help, (
                f"{name} {action.option_strings}: {action.help}"
            )
    with pytest.raises(SystemExit) as exit_:
        main(["rollout", "--config", "x.yaml", "--max-steps", "3"])  # rollout never used it
    assert exit_.value.code == 2 and "unrecognized arguments: --max-steps" in capsys.readouterr().err


def test_a_missing_config_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--config", "/no/such/config.yaml"])
    assert exit_.value.code == 2 and "cannot read the config /no/such/config.yaml" in capsys.readouterr().err


def unreachable_config(tmp_path: Path, domain: str) -> tuple[Path, str]:
    """The domain's config with its service on a port nothing listens on, and that URL."""
    config = yaml.safe_load((CONFIGS / f"{domain}.yaml").read_text())
    url = config["services"][domain]["url"] = f"http://127.0.0.1:{free_port()}"
    (tmp_path / f"{domain}.yaml").write_text(yaml.safe_dump(config))
    return tmp_path / f"{domain}.yaml", url


def down_line(command: str, domain: str, url: str) -> str:
    return (
        f"{command}: error: no answer from the {domain} service at {url} (ConnectError: [Errno 111] "
        f"Connection refused); "
        "start the services with `python -m corrgrpo_devtools up` (local processes) or `docker compose up "
        "-d`\n"
    )


@pytest.mark.parametrize(
    ("module", "argv", "domain"),
    [("corrgrpo_trainer", ["train"], "code"), ("corrgrpo_trainer", ["eval"], "agentdojo")],
)
def test_a_service_that_does_not_answer_is_one_line_and_exit_2_before_the_model_loads(
    tmp_path: Path, module: str, argv: list[str], domain: str
) -> None:
    config, url = unreachable_config(tmp_path, domain)
    # A model that does not exist: had it been loaded first, the error would be about the model.
    run = subprocess.run(
        [sys.executable, "-m", module, *argv, "--config", str(config), "--model", str(tmp_path / "no-model")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr == down_line(f"python -m {module} {argv[0]}", domain, url)


def test_rollout_checks_its_service_and_every_down_service_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, url = unreachable_config(tmp_path, "agentdojo")
    with pytest.raises(SystemExit) as exit_:
        main(["rollout", "--config", str(config), "--model", str(tmp_path / "no-model")])
    assert exit_.value.code == 2 and capsys.readouterr().err == down_line(
        "python -m corrgrpo_trainer rollout", "agentdojo", url
    )
    urls = {name: f"http://127.0.0.1:{free_port()}" for name in ("code", "toolcall")}
    with pytest.raises(ServicesDown) as down:
        check_services({name: Service(url=url) for name, url in urls.items()})
    assert str(down.value).startswith(
        f"no answer from the code service at {urls['code']} (ConnectError: [Errno 111] Connection refused), "
        f"the toolcall service at {urls['toolcall']} (ConnectError: [Errno 111] Connection refused); start "
        f"the services"
    )


def test_the_check_passes_a_live_service_and_names_a_url_that_is_not_one() -> None:
    with start_service("toolcall") as service:
        check_services({"toolcall": Service(url=service.url)})
        with pytest.raises(
            ServicesDown,
            match=r"the toolcall service at .*/v1 \(/healthz: HTTP 404, not a corrgrpo service\?\)",
        ):
            check_services({"toolcall": Service(url=f"{service.url}/v1")})


HOSTILE = {
    "deep.json": (
        "[" * 100_000,
        'nested deeper than 4 levels (expected [B][G][K] or {"rewards": [B][G][K]})',
    ),
    "five.json": (
        "[[[[[1]]]]]",
        'nested deeper than 4 levels (expected [B][G][K] or {"rewards": [B][G][K]})',
    ),
    "nan.json": ("[[[NaN, 1]]]", "NaN is not a JSON number (a missing reward is null)"),
    "inf.json": ('{"rewards": [[[-Infinity]]]}', "-Infinity is not a JSON number (a missing reward is null)"),
    "big.json": (
        "[[[1e999]]]",
        "rewards[0][0][0]: a number too large for a 64-bit float (expected a finite number or null)",
    ),
    "digits.json": (f"[[[0], [{'9' * 5000}]]]", "rewards[0][1][0]: a number too large for a 64-bit float"),
    "weight.json": (
        '{"rewards": [[[1]]], "weights": [1e400]}',
        "weights[0]: a number too large for a 64-bit float",
    ),
    "names.json": (
        '{"rewards": [[[1]]], "names": 5, "weights": {"a": 1}}',
        "names: expected a list of strings",
    ),
    "shape.json": ('{"rewards": {"a": 1}}', "rewards: expected a non-empty list of groups [B]"),
    "scalar.json": ("7", "rewards: expected a non-empty list of groups [B]"),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_advantages_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    content, message = HOSTILE[name]
    source = tmp_path / name
    source.write_text(content)
    with pytest.raises(SystemExit) as exit_:
        main(["advantages", "--input", str(source)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err and err.count("\n") == 1, err


def test_the_real_command_refuses_100k_deep_json_and_binary_input_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "deep.json").write_text("[" * 100_000)
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe[[[1]]]")
    prefix = "python -m corrgrpo_trainer advantages: error: "
    for name, message in [
        ("deep.json", 'nested deeper than 4 levels (expected [B][G][K] or {"rewards": [B][G][K]})'),
        ("binary.json", "is not UTF-8 text: invalid start byte at byte 0"),
    ]:
        run = subprocess.run(
            [sys.executable, "-m", "corrgrpo_trainer", "advantages", "--input", str(tmp_path / name)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 2 and run.stdout == "", run.stderr
        assert run.stderr == f"{prefix}{tmp_path / name}{':' if name == 'deep.json' else ''} {message}\n"


def test_an_unwritable_output_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "in.json"
    source.write_text(json.dumps(REWARDS))
    with pytest.raises(SystemExit) as exit_:
        main(["advantages", "--input", str(source), "--output", str(tmp_path / "no" / "out.json")])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.endswith(
        f"error: cannot write {tmp_path / 'no' / 'out.json'}: No such file or directory\n"
    )


def option_helps(text: str) -> list[str]:
    """Each option's (or positional's) entry of an argparse help text, its wrapped lines joined."""
    entries: list[str] = []
    for line in text.splitlines():
        if re.match(r"  \S", line):
            entries.append(line.strip())
        elif entries and line.startswith("    ") and line.strip():
            entries[-1] += " " + line.strip()
    return entries


def help_of(entry: Callable[[], object], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_:
        entry()
    assert exit_.value.code == 0
    return capsys.readouterr().out


def every_cli() -> dict[str, Callable[[], object]]:
    """`--help` of every command line of the repository's packages, as a call."""
    from corrgrpo_common import cli as service_cli
    from corrgrpo_common.registry import declared
    from corrgrpo_devtools import docs, execution_metrics, launcher, match_metrics

    clis: dict[str, Callable[[], object]] = {
        f"corrgrpo_trainer {name}": partial(main, [name, "--help"]) for name in COMMANDS
    }
    clis |= {
        f"corrgrpo_{name}": partial(service_cli.serve, service, ["--help"])
        for name, service in declared().items()
    }
    return clis | {
        "corrgrpo_trainer": partial(main, ["--help"]),
        "corrgrpo_devtools.execution_metrics": partial(execution_metrics.main, ["--help"]),
        "corrgrpo_devtools.match_metrics": partial(match_metrics.main, ["--help"]),
        "corrgrpo_devtools": partial(launcher.main, ["--help"]),
        "corrgrpo_devtools up": partial(launcher.main, ["up", "--help"]),
        "corrgrpo_devtools.docs": partial(docs.main, ["--help"]),
    }


def test_every_help_text_prints_each_default_once(capsys: pytest.CaptureFixture[str]) -> None:
    for name, entry in every_cli().items():
        for option in option_helps(help_of(entry, capsys)):
            assert option.count("default") <= 1, f"python -m {name}: {option}"
            assert "(default: None)" not in option and "(default: False)" not in option, (
                f"python -m {name}: {option}"
            )


def test_the_code_evaluator_on_unreadable_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "rows.jsonl").write_text(
        '{"task_id": "HumanEval/0", "completion": "x"}\n{"completion": "y"}\n'
    )
    (tmp_path / "deep.jsonl").write_text("[" * 100_000 + "\n")
    cases = [
        ([str(tmp_path / "none.jsonl")], f"cannot read {tmp_path / 'none.jsonl'}: No such file or directory"),
        (
            [str(tmp_path / "rows.jsonl")],
            f'{tmp_path / "rows.jsonl"}: row 2 is not an object with "task_id" and "completion"',
        ),
        (
            [str(tmp_path / "deep.jsonl")],
            f'{tmp_path / "deep.jsonl"}: expected JSONL of {{"task_id", "completion"}} (Recursion',
        ),
        (
            [str(tmp_path / "rows.jsonl"), "--dataset", "nope"],
            "--dataset nope: unknown dataset source 'nope'; use humaneval or "
            "<leetcode|livecodebench|taco|apps|mbpp|codecontests>:<path or hub id>",
        ),
    ]
    for argv, message in cases:
        run = subprocess.run(
            [sys.executable, "-m", "corrgrpo_devtools.execution_metrics", "--completions", *argv],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 2 and run.stdout == "" and run.stderr.count("\n") == 1, run.stderr
        prog = "python -m corrgrpo_devtools.execution_metrics"
        assert run.stderr.startswith(f"{prog}: error: {message}"), run.stderr
