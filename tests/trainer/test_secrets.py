"""The bearer token: read from $CORRGRPO_API_TOKEN or the file a config names, never written to the run
directory, sent only to the services the run was configured with; an empty one refuses to start in one line.
Against the real toolcall service with auth on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from corrgrpo_proto import RewardClient
from corrgrpo_testing.environment import require_shared_data
from corrgrpo_testing.servers import ServiceProcess, start_service
from corrgrpo_testing.tiny_runs import cpu_config
from corrgrpo_trainer.cli import main
from corrgrpo_trainer.config import TOKEN_ENV, InputError, read_config
from corrgrpo_trainer.rewards import check_services
from corrgrpo_trainer.rundir import RESOLVED_CONFIG, RolloutWriter

SECRET = "s3cret-token-of-the-test"
TRUTH = '<tool_call>\n{"name": "get_weather", "parameters": {"city": "Paris"}}\n</tool_call>'


@pytest.fixture(scope="module")
def toolcall() -> Iterator[ServiceProcess]:
    with start_service("toolcall", env={TOKEN_ENV: SECRET}) as service:
        yield service


def config_file(tmp_path: Path, url: str, client: dict[str, str] | None = None) -> Path:
    config = cpu_config("toolcall.yaml", tmp_path / "out", batch=2, generations=2)
    data = require_shared_data("rlla_4k/test.parquet")
    config |= {"dataset": {"path": str(data), "limit": 2}}
    config["services"]["toolcall"] |= {"url": url, "client": client or {}}
    path = tmp_path / "toolcall.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def exit_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    return capsys.readouterr().err


@pytest.mark.slow
def test_the_token_of_the_environment_trains_and_stays_out_of_the_run_directory(
    tmp_path: Path, toolcall: ServiceProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_ENV, SECRET)
    assert (
        main(
            [
                "run",
                "--config",
                str(config_file(tmp_path, toolcall.url)),
                "--model",
                "tiny",
                "--max-steps",
                "1",
            ]
        )
        == 0
    )
    written = [path for path in (tmp_path / "out").rglob("*") if path.is_file()]
    assert (tmp_path / "out" / RESOLVED_CONFIG) in written and (
        tmp_path / "out" / "rollouts.jsonl"
    ) in written
    assert [path for path in written if SECRET.encode() in path.read_bytes()] == []


def test_a_token_file_named_by_the_config_is_read_and_only_its_path_kept(
    tmp_path: Path, toolcall: ServiceProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    (tmp_path / "token").write_text(SECRET + "\n")
    config = read_config(config_file(tmp_path, toolcall.url, {"token_file": "token"}))
    client = config.services["toolcall"].client.model_dump(exclude_none=True)
    assert client == {"token_file": str(tmp_path / "token")}  # beside the config
    check_services(config.services)  # the service refuses a request without its token: this one carried it
    (tmp_path / "token").write_text("wrong")
    with pytest.raises(InputError, match="refused the token \\(HTTP 401\\)"):
        check_services(config.services)


def test_a_token_in_the_config_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = config_file(tmp_path, "http://127.0.0.1:9", {"token": SECRET})
    line = exit_line(["train", "--config", str(path)], capsys)
    assert line == (
        f"python -m corrgrpo_trainer train: error: {path}: services.toolcall.client.token: a token is never "
        f"written "
        f"in a config (the run directory keeps the config): set ${TOKEN_ENV} or name a file holding it with "
        "services.toolcall.client.token_file\n"
    )


@pytest.mark.parametrize("source", ["environment", "file"])
def test_an_empty_token_refuses_to_start_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    (tmp_path / "token").write_text("\n")
    client = {"token_file": str(tmp_path / "token")} if source == "file" else {}
    monkeypatch.setenv(TOKEN_ENV, "" if source == "environment" else SECRET)
    path = config_file(tmp_path, "http://127.0.0.1:9", client)
    where = f"${TOKEN_ENV}" if source == "environment" else f"the token file {tmp_path / 'token'}"
    assert exit_line(["train", "--config", str(path)], capsys) == (
        f"python -m corrgrpo_trainer train: error: {where} is empty: give the services' bearer token, or "
        f"unset it for "
        "services without one\n"
    )


def test_rescore_sends_the_token_to_the_runs_services_only(
    tmp_path: Path,
    toolcall: ServiceProcess,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(TOKEN_ENV, SECRET)
    rows = [{"prompt": [{"role": "user", "content": "Weather in Paris?"}], "ground_truth": TRUTH}] * 2
    with RewardClient(toolcall.url, token=SECRET) as client:
        results = client.score([{"completion": TRUTH, "ground_truth": TRUTH}] * 2)
    components = list(results[0].components or {})
    writer = RolloutWriter(tmp_path, components, [1.0] * len(components), "corrgrpo", group=2)
    rewards = [[r.components[name] for name in components] for r in results if r.components]
    writer.write(
        1, rows, [TRUTH] * 2, rewards, [0.0] * 2, {"stage/toolcall": [r.info.get("stage") for r in results]}
    )
    config = {"domain": "toolcall", "services": {"toolcall": {"url": toolcall.url, "components": components}}}
    (tmp_path / RESOLVED_CONFIG).write_text(yaml.safe_dump(config))
    assert main(["rescore", str(tmp_path)]) == 0  # the run's own service: the token goes
    elsewhere = toolcall.url.replace("127.0.0.1", "localhost")  # the same service, as any other URL would be
    line = exit_line(["rescore", str(tmp_path), "--url", f"toolcall={elsewhere}"], capsys)
    assert f"the toolcall service at {elsewhere} refused the request without a token (HTTP 401)" in line
    (tmp_path / "token").write_text(SECRET)
    assert (
        main(
            [
                "rescore",
                str(tmp_path),
                "--url",
                f"toolcall={elsewhere}",
                "--token-file",
                str(tmp_path / "token"),
            ]
        )
        == 0
    )
