"""A group's completions share their ground truth: it is parsed once per batch, whatever its size."""

from __future__ import annotations

import json

import pytest

from corrgrpo_toolcall import scoring


def ground_truth(params: int) -> str:
    call = json.dumps({"name": "f", "parameters": {f"p{i}": i for i in range(params)}})
    return f"<think>t</think>\n<tool_call>\n{call}\n</tool_call>"


@pytest.mark.parametrize("params", [3, 2000])  # cached (short) and uncached (over CACHED_TRUTH_CHARS)
def test_score_group_parses_the_ground_truth_once(params: int, monkeypatch: pytest.MonkeyPatch) -> None:
    truth = ground_truth(params)
    assert (len(truth) > scoring.CACHED_TRUTH_CHARS) == (params == 2000)
    scoring._cached_truth_calls.cache_clear()
    truth_parses: list[str] = []
    real = scoring.parse_calls

    def counting(
        text: str, max_calls: int | None = scoring.ParseCaps.max_calls, strict: bool = True
    ) -> list[scoring.ToolCall]:
        if max_calls is None:  # how the ground truth is parsed (completions are parsed with the cap)
            truth_parses.append(text)
        return real(text, max_calls, strict)

    monkeypatch.setattr(scoring, "parse_calls", counting)
    results = scoring.score_group([truth] * 50, truth)
    assert [r.matching.exact for r in results if r.matching] == [True] * 50
    assert truth_parses == [truth]
