"""Real data: RLLA-4K test rows and API-Bank levels scored against themselves, and the evaluation command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corrgrpo_devtools import match_metrics
from corrgrpo_testing.environment import require_shared_data
from corrgrpo_toolcall.datasets import load, load_api_bank, load_rlla4k
from corrgrpo_toolcall.scoring import score


def test_rlla4k_ground_truths_score_full_against_themselves() -> None:
    examples = load_rlla4k(require_shared_data("rlla_4k/test.parquet"))
    assert len(examples) == 80
    with_calls = 0
    for example in examples:
        result = score(example.ground_truth, example.ground_truth)
        assert result.format == 1.0, example.id
        total = sum(result.components.values())
        if "<tool_call>" in example.ground_truth:
            with_calls += 1
            assert total == pytest.approx(3.0, abs=1e-12), example.id
            assert result.matching is not None and result.matching.exact
        else:
            assert total == 0.0, example.id
    assert with_calls == 71


@pytest.mark.parametrize(("level", "rows"), [(1, 399), (2, 67), (3, 131)])
def test_api_bank_levels_load_as_single_call_ground_truths(level: int, rows: int) -> None:
    examples = load_api_bank(level, require_shared_data("api_bank").as_posix())
    assert len(examples) == rows
    assert [m["role"] for m in examples[0].prompt] == ["system", "user"]
    for example in examples:
        result = score(example.ground_truth, example.ground_truth)
        assert result.matching is not None and result.matching.gt_calls == 1
        assert result.format == 1.0 and sum(result.components.values()) == pytest.approx(3.0)


def test_evaluate_self_reports_full_scores(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "CORRGRPO_TOOLCALL_DATA_DIR", str(require_shared_data("rlla_4k/test.parquet").parents[1])
    )
    assert match_metrics.main(["--dataset", "rlla4k", "--self"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("| dataset | rows | with calls | format % | function name |")
    assert lines[2] == "| rlla4k | 80 | 71 | 100.00 | 100.00 | 100.00 | 100.00 | 100.00 |"


def test_evaluate_completions_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CORRGRPO_TOOLCALL_DATA_DIR", str(require_shared_data("api_bank").parent))
    examples = load("api-bank-2", require_shared_data("api_bank"))
    # every other completion answers in prose instead of calling the tool
    lines = [
        {"completion": e.ground_truth if i % 2 else "<think>x</think>\n<response>no</response>"}
        for i, e in enumerate(examples)
    ]
    path = tmp_path / "completions.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    match_metrics.main(["--dataset", "api-bank-2", "--completions", str(path)])
    row = capsys.readouterr().out.strip().splitlines()[2].strip("| ").split(" | ")
    half = f"{100 * (len(examples) // 2) / len(examples):.2f}"
    assert row == ["api-bank-2", "67", "67", half, half, half, half, half]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines[:3]))  # a slice: the first three rows
    match_metrics.main(["--dataset", "api-bank-2", "--completions", str(path)])
    captured = capsys.readouterr()
    # rows 1 of 0, 1, 2 call
    assert captured.out.strip().splitlines()[2].startswith("| api-bank-2 | 3 | 3 | 33.33 |")
    assert "scoring the first 3 of 67 rows" in captured.err
    match_metrics.main(["--dataset", "api-bank-2", "--completions", str(path), "--limit", "3"])
    assert capsys.readouterr().out.strip().splitlines()[2].startswith("| api-bank-2 | 3 | 3 | 33.33 |")
    error = "python -m corrgrpo_devtools.match_metrics: error: "
    with pytest.raises(SystemExit) as exit_:
        match_metrics.main(["--dataset", "api-bank-2", "--completions", str(path), "--limit", "2"])
    assert exit_.value.code == 2 and capsys.readouterr().err == f"{error}{path}: 3 completions for 2 rows\n"
    path.write_text("not json\n")
    with pytest.raises(SystemExit) as exit_:
        match_metrics.main(["--dataset", "api-bank-2", "--completions", str(path)])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.startswith(
        f'{error}{path}: expected JSONL of {{"completion": "..."}} (JSONDecodeError'
    )
    with pytest.raises(SystemExit) as exit_:
        match_metrics.main(["--dataset", "api-bank-2", "--completions", str(tmp_path / "missing.jsonl")])
    assert exit_.value.code == 2
    assert (
        capsys.readouterr().err
        == f"{error}cannot read {tmp_path / 'missing.jsonl'}: No such file or directory\n"
    )


def test_unknown_dataset_is_named_in_the_error() -> None:
    with pytest.raises(ValueError, match="unknown dataset 'api-bank-4'; known: rlla4k, api-bank-1"):
        load("api-bank-4", "unused")


def test_evaluate_without_a_source_names_the_setting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("CORRGRPO_TOOLCALL_DATA_DIR", raising=False)
    with pytest.raises(SystemExit):
        match_metrics.main(["--dataset", "rlla4k", "--self"])
    assert "pass --source or set CORRGRPO_TOOLCALL_DATA_DIR" in capsys.readouterr().err
