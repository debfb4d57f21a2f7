"""OpenRLHF's own reward fetching against the services (`make interop`): its single-turn agent executor.

OpenRLHF is imported from its PyPI packages in `.venv-openrlhf` (`pip --target`, no dependencies: only the
module path, its imports come from this venv): 0.11.0, the last version that splits every sample over all
the URLs given (so all servers but one receive empty lists), and 0.11.2, which skips empty shards and
rotates the URLs. The executor is driven as vLLM would drive it, with a tokenizer that decodes the
response's end-of-turn token into the query.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from corrgrpo_testing.servers import start_service
from corrgrpo_trainer.tiny import build_tiny_tokenizer

SIDE = Path(__file__).resolve().parents[3] / ".venv-openrlhf"
GT = '<think>x</think>\n<tool_call>\n{"name": "f", "parameters": {"a": 1, "b": "x"}}\n</tool_call>'
HALF = GT.replace('"a": 1', '"a": 2')


@pytest.fixture(params=["0.11.0", "0.11.2"])
def openrlhf(request: pytest.FixtureRequest) -> Iterator[ModuleType]:
    """`openrlhf.utils.agent` of one OpenRLHF version; unloaded afterwards."""
    paths = [str(SIDE / request.param), str(SIDE / "deps")]
    if not all(Path(p).is_dir() for p in paths):
        pytest.fail(f"{SIDE} is missing: run tests/interop/venvs.sh (make interop)")
    sys.path[:0] = paths[:1]
    sys.path.append(paths[1])
    try:
        module = importlib.import_module("openrlhf.utils.agent")
        assert module.__file__.startswith(paths[0])
        yield module
    finally:
        for path in paths:
            sys.path.remove(path)
        for name in [m for m in sys.modules if m == "openrlhf" or m.startswith("openrlhf.")]:
            del sys.modules[name]


@pytest.fixture(scope="module")
def toolcall_urls() -> Iterator[list[str]]:
    with (
        start_service("toolcall") as first,
        start_service("toolcall") as second,
        start_service("toolcall") as third,
    ):
        yield [f"{s.url}/v1/openrlhf" for s in (first, second, third)]


class Engine:
    """vLLM's `generate` as OpenRLHF's executor calls it: the scripted response's tokens, then EOS."""

    def __init__(self, tokenizer: Any, response: str) -> None:
        self.ids = tokenizer(response, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]

    async def generate(self, prompt_ids: list[int], sampling_params: Any, **_: Any) -> Any:
        output = SimpleNamespace(token_ids=self.ids, text="", finish_reason="stop", logprobs=None)
        return SimpleNamespace(outputs=[output])


async def execute(openrlhf: ModuleType, urls: list[str], response: str, label: str) -> dict[str, Any]:
    tokenizer = build_tiny_tokenizer()
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "call f"}], tokenize=False, add_generation_prompt=True
    )
    executor = openrlhf.SingleTurnAgentExecutor(urls)
    params = SimpleNamespace(max_tokens=256, logprobs=None)
    return await executor.execute(prompt, label, params, 1024, tokenizer, Engine(tokenizer, response))


async def test_one_sample_over_several_urls_gets_its_reward(
    openrlhf: ModuleType, toolcall_urls: list[str]
) -> None:
    exact = await execute(openrlhf, toolcall_urls, GT, GT)
    half = await execute(openrlhf, toolcall_urls, HALF, GT)
    assert exact["reward"] == [pytest.approx(4.0)], "OpenRLHF got no reward (its log says why)"
    assert half["reward"][0] < exact["reward"][0]
    assert exact["extra_logs"]["corrgrpo_error"] == [0.0] and exact["extra_logs"]["format"] == [1.0]


async def test_empty_shards_are_answered(openrlhf: ModuleType, toolcall_urls: list[str]) -> None:
    executor = openrlhf.SingleTurnAgentExecutor(toolcall_urls)
    answers = await executor._fetch_rewards_via_http([GT], [""], [GT])
    assert answers[0]["rewards"] == [pytest.approx(4.0)]
    # 0.11.0 sends two empty shards; 0.11.2 none
    assert all(answer["rewards"] == [] for answer in answers[1:])


async def test_an_unscored_sample_gets_no_reward_rather_than_0(openrlhf: ModuleType) -> None:
    """The rule of corrgrpo_proto.common: the service refuses a batch holding an item it could not score (422
    `unscored_items`); OpenRLHF retries it, then leaves the sample without a reward, never with a 0."""
    with start_service("code", env={"CORRGRPO_CODE_DATASETS": "humaneval"}) as code:
        unscored = await execute(openrlhf, [f"{code.url}/v1/openrlhf"], "```python\nx = 1\n```", "NoSuch/1")
        scored = await execute(openrlhf, [f"{code.url}/v1/openrlhf"], "```python\nx = 1\n```", "HumanEval/0")
    assert unscored["reward"] is None and unscored["extra_logs"] == {}
    assert scored["reward"] is not None and scored["extra_logs"]["corrgrpo_error"] == [0.0]
