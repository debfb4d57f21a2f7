"""The typed config: the exact one-line message of each mistake (exit 2, before anything loads), `--set`,
paths relative to the config file, the shipped configs, and the checked-in JSON Schemas."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest
import yaml

from corrgrpo_trainer.advantages import ESTIMATORS
from corrgrpo_trainer.cli import main
from corrgrpo_trainer.config import read_config
from corrgrpo_trainer.config_shape import SCHEMA_DIR, SHAPES, Domain, Estimator, schema_files

CONFIGS = Path(__file__).resolve().parents[2] / "trainer" / "configs"
PREFIX = "python -m corrgrpo_trainer {}: error: "


def write_config(tmp_path: Path, name: str = "toolcall.yaml", edit: tuple[str, str] | None = None) -> Path:
    """The shipped config `name` copied into tmp_path, with one text replacement."""
    text = (CONFIGS / name).read_text()
    if edit:
        assert edit[0] in text
        text = text.replace(*edit)
    (tmp_path / name).write_text(text)
    return tmp_path / name


MISTAKES = [
    (
        ("estimator: corrgrpo", "estimater: grpo"),
        [],
        "{file}: unknown key 'estimater'; did you mean 'estimator'?",
    ),
    (
        ("per_device_train_batch_size: 4", "per_device_batch_size: 4"),
        [],
        "{file}: unknown key 'trl.per_device_batch_size' (not a trl.GRPOConfig field); "
        "did you mean 'trl.per_device_eval_batch_size' or 'trl.per_device_train_batch_size'?",
    ),
    (
        ("per_device_train_batch_size: 4", "per_device_train_batch_size: eight"),
        [],
        "{file}: trl.per_device_train_batch_size: Input should be a valid integer, unable to parse string "
        "as an "
        "integer (got 'eight')",
    ),
    (
        ("offset: 32", "offset: -1"),
        [],
        "{file}: dataset.offset: Input should be greater than or equal to 0 (got -1)",
    ),
    (
        None,
        ["estimator=grpoo"],
        "--set estimator=grpoo: estimator: 'grpoo' is not one of corrgrpo, grpo, gdpo; did you mean 'grpo'?",
    ),
    (
        None,
        ["domain=tolcall"],
        "--set domain=tolcall: domain: 'tolcall' is not one of code, toolcall, agentdojo; did you mean "
        "'toolcall'?",
    ),
    (
        None,
        ["services.toolcall.client.timout=3"],
        "--set services.toolcall.client.timout=3: unknown key 'services.toolcall.client.timout'; "
        "did you mean 'services.toolcall.client.timeout'?",
    ),
    (
        None,
        ["trl.reward_weights=[1]"],
        "--set trl.reward_weights=[1]: trl.reward_weights is set by services.<name>.weights",
    ),
    (None, ["estimator"], "--set estimator: expected KEY.PATH=VALUE, e.g. --set estimator=grpo"),
    (None, ["trl.max_steps.x=1"], "--set trl.max_steps.x=1: trl.max_steps is not a mapping"),
    (("  path: https", "  pth: https"), [], "{file}: dataset.path: missing (required)"),
]


@pytest.mark.parametrize(("edit", "sets", "message"), MISTAKES)
def test_a_mistake_is_one_line_naming_the_key_its_origin_and_the_closest_name(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    edit: tuple[str, str] | None,
    sets: list[str],
    message: str,
) -> None:
    config = write_config(tmp_path, edit=edit)
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--config", str(config), *(a for s in sets for a in ("--set", s))])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == PREFIX.format("train") + message.format(file=config) + "\n"


def test_a_warmup_config_is_checked_against_trls_sft_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, "toolcall_sft.yaml")
    with pytest.raises(SystemExit) as exit_:
        main(["sft", "--config", str(config), "--set", "trl.num_generations=2"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == PREFIX.format("sft") + (
        "--set trl.num_generations=2: unknown key 'trl.num_generations' (not a trl.SFTConfig field)\n"
    )


def test_inputs_in_the_file_are_relative_to_it_outputs_and_set_paths_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, elsewhere = tmp_path / "experiment", tmp_path / "elsewhere"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "rows.parquet").touch()
    elsewhere.mkdir()
    raw = {
        "domain": "toolcall",
        "warmup": "../warm.yaml",
        "dataset": {"path": "data/rows.parquet"},
        "services": {"toolcall": {"url": "http://127.0.0.1:8102"}},
        "trl": {"output_dir": "out"},
    }
    (folder / "rl.yaml").write_text(yaml.safe_dump(raw))
    monkeypatch.chdir(elsewhere)
    config = read_config(Path("..") / "experiment" / "rl.yaml")
    assert config.dataset.path == str(folder / "data" / "rows.parquet")
    assert config.warmup == str(tmp_path / "warm.yaml")
    assert config.output_dir == config.run_dir == str(elsewhere / "out")  # never beside the config
    assert config.model == "smollm2-135m-instruct"  # a name, not a path
    again = read_config(folder / "rl.yaml", overrides=["trl.output_dir=out", "dataset.path=owner/name"])
    assert again.output_dir == again.run_dir == str(elsewhere / "out")
    assert again.dataset.path == "owner/name"  # a hub id stays one


def test_set_reads_its_value_as_yaml_and_fills_in_defaults(tmp_path: Path) -> None:
    config = read_config(
        write_config(tmp_path),
        overrides=[
            "services.toolcall.components=[format, name]",
            "advantage_floor=0.5",
            "trl.learning_rate=1e-5",
            "trl.logging_steps=1",
        ],
    )
    assert "logging_steps: 1\n" in yaml.safe_dump(config.trl)  # as given, not the field type's 1.0
    assert config.services["toolcall"].components == ["format", "name"] and config.advantage_floor == 0.5
    # YAML 1.1 reads 1e-5 as a string; TRL's float type converts it
    assert config.trl["learning_rate"] == 1e-5
    assert config.dataset.split == "train" and config.services["toolcall"].prefix == ""
    assert config.estimator == "corrgrpo" and config.domain.episodes is False  # the defaults, from the model


@pytest.mark.parametrize("path", sorted(CONFIGS.rglob("*.yaml")), ids=lambda p: str(p.relative_to(CONFIGS)))
def test_every_shipped_config_is_valid_and_names_public_datasets(path: Path) -> None:
    config = read_config(path, "warmup" if path.stem.endswith("_sft") else "rl")
    assert "shared/data" not in path.read_text()
    sources = [path for paths in config.dataset.sources.values() for path in paths]
    assert all(s.startswith("https://") or s.count("/") == 1 for s in sources), sources
    if getattr(config, "warmup", None):
        assert read_config(config.warmup, "warmup").domain == config.domain


def test_checked_in_schemas_match_the_config_models() -> None:
    files = schema_files()
    assert sorted(files) == sorted(p.name for p in SCHEMA_DIR.glob("*.json"))
    for name, text in files.items():
        assert (SCHEMA_DIR / name).read_text() == text, (
            f"run `python -m corrgrpo_trainer schema` and commit {name}"
        )
    rl = yaml.safe_load(files["rl.schema.json"])
    assert set(rl["$defs"]["ToolcallRL"]["properties"]) >= {
        "estimator",
        "warmup",
        "run_dir",
        "evaluation",
        "trl",
    }


def test_a_missing_local_dataset_is_one_line_before_the_services_are_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "rl.yaml"
    down = {"toolcall": {"url": "http://127.0.0.1:9"}}  # asked first, it would be the error
    config.write_text(
        yaml.safe_dump({"domain": "toolcall", "dataset": {"path": "rows.parquet"}, "services": down})
    )
    for sets, message in [
        ([], f"{config}: dataset.path: no such file or folder: {tmp_path / 'rows.parquet'}"),
        (
            ["--set", "dataset.path=./rows.parquet"],
            f"--set dataset.path=./rows.parquet: dataset.path: no such file or folder: "
            f"{Path.cwd() / 'rows.parquet'}",
        ),
    ]:
        with pytest.raises(SystemExit) as exit_:
            main(["train", "--config", str(config), *sets])
        assert exit_.value.code == 2 and capsys.readouterr().err == PREFIX.format("train") + message + "\n"


def test_a_config_names_exactly_the_estimators_advantages_defines() -> None:
    assert sorted(typing.get_args(Estimator)) == sorted(ESTIMATORS)


def test_only_agentdojo_rollouts_are_episodes_and_each_domain_has_an_rl_shape() -> None:
    assert [domain for domain in Domain if domain.episodes] == [Domain.AGENTDOJO]
    assert set(SHAPES["rl"]) == set(Domain) and set(SHAPES["warmup"]) == {Domain.TOOLCALL, Domain.AGENTDOJO}
