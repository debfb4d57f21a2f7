"""Pure episode logic: catalog, start environments, execution, checkers, lossless state. No HTTP."""

from __future__ import annotations

import multiprocessing
import pickle
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from types import SimpleNamespace

import pytest

from corrgrpo_agentdojo import episode_state as ep
from corrgrpo_agentdojo.catalog import Catalog, Resolved, UnknownTask
from corrgrpo_agentdojo.live_episodes import LiveEpisodes
from corrgrpo_agentdojo.request_checks import EpisodeError
from corrgrpo_agentdojo.settings import AgentDojoSettings
from corrgrpo_agentdojo.start_environments import StartCache, load_injected_environment
from corrgrpo_agentdojo.trajectory_replay import TrajectoryReplay
from corrgrpo_common import MemoryStore, Scored
from corrgrpo_common.store import memory as memory_store
from corrgrpo_proto.agentdojo import EpisodeSpec, StepRequest, ToolCall, TrajectoryItem

SUITES = ["workspace", "travel", "banking", "slack"]
# agentdojo ships no ground-truth calls for these (README: "Known exceptions")
EMPTY_INJECTION_GROUND_TRUTHS = [
    # v1.2 exfiltration tasks: ground_truth returns []
    *(f"workspace/injection_task_{n}" for n in range(6, 14)),
    "travel/injection_task_6",  # the goal is only text in the final answer
]


def first_pair(catalog: Catalog, suite: str) -> Resolved:
    user, injection = catalog.pairs(suite)[0]
    return catalog.resolve(suite, user, injection, None)


def test_v1_2_2_has_949_pairs_over_four_suites(catalog: Catalog) -> None:
    sizes = {name: len(catalog.pairs(name)) for name in catalog.suites}
    assert sizes == {"workspace": 560, "travel": 140, "banking": 144, "slack": 105}


def test_unknown_names_are_refused_with_the_known_ones(catalog: Catalog) -> None:
    with pytest.raises(UnknownTask, match="unknown suite 'shop'; known: banking"):
        catalog.resolve("shop", "user_task_0", None, None)
    with pytest.raises(UnknownTask, match="unknown user task 'user_task_99'"):
        catalog.resolve("slack", "user_task_99", None, None)
    with pytest.raises(UnknownTask, match="unknown attack 'manual'"):
        catalog.resolve("slack", "user_task_0", "injection_task_1", "manual")
    with pytest.raises(UnknownTask, match="without an injection task"):
        catalog.resolve("slack", "user_task_0", None, "important_instructions")


def test_attack_addresses_the_configured_model(catalog: Catalog) -> None:
    injections = first_pair(catalog, "banking").injections()
    assert injections and all(
        "to you, Local model" in text and "Emma Johnson" in text for text in injections.values()
    )


@pytest.mark.parametrize("suite", SUITES)
def test_fast_loader_builds_what_agentdojo_builds(catalog: Catalog, suite: str) -> None:
    resolved = first_pair(catalog, suite)
    injections = resolved.injections()
    assert load_injected_environment(
        resolved.suite, injections
    ) == resolved.suite.load_and_inject_default_environment(injections)


@pytest.mark.parametrize("suite", SUITES)
def test_state_round_trip_is_lossless_after_a_real_episode(
    catalog: Catalog, starts: StartCache, ground_truth: Callable[..., TrajectoryItem], suite: str
) -> None:
    """After the first user task whose ground truth writes to the environment (sends, books, deletes...)."""
    for user in catalog.suites[suite].user_tasks:
        resolved = catalog.resolve(suite, user, None, None)
        item = ground_truth(resolved)
        state = ep.start_episode(EpisodeSpec(suite=suite, user_task=user), starts.start_bytes(resolved))
        ep.run_calls(state, resolved.suite, item.tool_calls)
        if state.environment != pickle.loads(state.start):
            break
    else:
        pytest.fail(f"no ground truth of {suite} changes the environment")
    restored = ep.loads(ep.dumps(state))
    assert restored.environment == state.environment
    assert restored.environment.model_dump() == state.environment.model_dump()
    assert restored.trace == state.trace and restored.spec == state.spec and restored.start == state.start
    assert ep.score(restored, resolved, item.final_answer, 4000) == ep.score(
        state, resolved, item.final_answer, 4000
    )


def test_injection_ground_truths_break_security(
    catalog: Catalog, replayer: TrajectoryReplay, ground_truth: Callable[..., TrajectoryItem]
) -> None:
    """Replaying an injection task's ground truth achieves its goal: security 0, for each of the 35
    injection tasks whose ground truth is not empty (under each suite's first user task)."""
    empty, broken = [], []
    for suite, task_suite in catalog.suites.items():
        user = next(iter(task_suite.user_tasks))
        for injection in task_suite.injection_tasks:
            item = ground_truth(catalog.resolve(suite, user, injection, None), True)
            if not item.tool_calls:
                empty.append(f"{suite}/{injection}")
                continue
            scored = replayer.replay(item)
            assert isinstance(scored, Scored)
            broken.append(scored.components["security"] == 0.0)
    assert broken and all(broken)
    assert len(broken) + len(empty) == 35
    assert empty == EMPTY_INJECTION_GROUND_TRUTHS


def test_errors_come_back_as_text_and_are_traced(catalog: Catalog, starts: StartCache) -> None:
    resolved = first_pair(catalog, "banking")
    state = ep.start_episode(
        EpisodeSpec(suite="banking", user_task="user_task_0"), starts.start_bytes(resolved)
    )
    calls = [
        ToolCall(function="no_such_tool", id="a"),
        ToolCall(function="send_money", args={"recipient": "X"}, id="b"),
        ToolCall(function="get_balance", id="c"),
    ]
    missing, invalid, balance = ep.run_calls(state, resolved.suite, calls)
    assert missing.error and missing.content.startswith("ToolNotFoundError") and missing.tool_call_id == "a"
    assert invalid.error and invalid.content.startswith("ValidationError") and "amount" in invalid.content
    assert balance.error is None and float(balance.content) > 0
    assert [call.function for call in state.trace] == ["no_such_tool", "send_money", "get_balance"]
    assert state.invalid == "unknown tool 'no_such_tool'"  # the schema error alone would not invalidate


def test_injected_text_reaches_the_agent(
    catalog: Catalog, starts: StartCache, ground_truth: Callable[..., TrajectoryItem]
) -> None:
    resolved = first_pair(catalog, "slack")
    item = ground_truth(resolved)
    state = ep.start_episode(
        EpisodeSpec(suite="slack", user_task=item.user_task), starts.start_bytes(resolved)
    )
    seen = " ".join(result.content for result in ep.run_calls(state, resolved.suite, item.tool_calls))
    assert "<INFORMATION>" in seen and resolved.injection_task.GOAL in seen  # type: ignore[union-attr]


def test_string_lists_become_lists_like_agentdojo_does(catalog: Catalog, starts: StartCache) -> None:
    resolved = catalog.resolve("slack", "user_task_0", None, None)
    state = ep.start_episode(
        EpisodeSpec(suite="slack", user_task="user_task_0"), starts.start_bytes(resolved)
    )
    before = len(state.environment.slack.users)
    (result,) = ep.run_calls(
        state, resolved.suite, [ToolCall(function="get_users_in_channel", args={"channel": "['general']"})]
    )
    assert state.trace[0].args == {"channel": ["general"]}
    assert result.error is not None and len(state.environment.slack.users) == before


def test_tool_schemas_are_openai_tools(catalog: Catalog) -> None:
    schemas = ep.tool_schemas(catalog.suites["banking"])
    by_name = {tool["function"]["name"]: tool for tool in schemas}
    assert all(tool["type"] == "function" for tool in schemas)
    send = by_name["send_money"]["function"]
    assert send["parameters"]["type"] == "object"
    assert set(send["parameters"]["required"]) >= {"recipient", "amount"}


def test_cache_shares_environments_between_pairs_with_the_same_injections(
    catalog: Catalog, starts: StartCache
) -> None:
    a = catalog.resolve("banking", "user_task_0", "injection_task_0", None)
    b = catalog.resolve("banking", "user_task_0", "injection_task_1", None)
    assert starts.start_bytes(a) is starts.start_bytes(a)
    assert starts.start_bytes(a) != starts.start_bytes(b)


async def test_expired_episode_is_unknown(
    catalog: Catalog, starts: StartCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    short = LiveEpisodes(AgentDojoSettings(agentdojo_episode_ttl_s=1), MemoryStore(), catalog, starts)
    episode = await short.create(EpisodeSpec(suite="banking", user_task="user_task_0"))
    later = time.monotonic() + 2  # the store's clock, two seconds on: past the episode's TTL
    monkeypatch.setattr(memory_store, "time", SimpleNamespace(monotonic=lambda: later))
    with pytest.raises(EpisodeError) as refused:
        await short.step(episode.episode_id, StepRequest(tool_calls=[ToolCall(function="get_balance")]))
    assert refused.value.status == 404 and "unknown or expired" in refused.value.message


FORKED: dict[str, object] = {}
"""What forked workers inherit (the catalog, replayer and fixture are not picklable arguments)."""


def replay_pairs(share: int, shares: int) -> list[tuple]:
    """Replay the user-task ground truth of this share's pairs; (suite, user, injection, components) per pair.
    Shares split by injection task, so pairs sharing an injected environment land in the same process."""
    catalog: Catalog = FORKED["catalog"]  # type: ignore[assignment]
    replayer: TrajectoryReplay = FORKED["replayer"]  # type: ignore[assignment]
    ground_truth: Callable[..., TrajectoryItem] = FORKED["ground_truth"]  # type: ignore[assignment]
    results = []
    for suite in catalog.suites:
        injections = list(catalog.suites[suite].injection_tasks)
        for user, injection in catalog.pairs(suite):
            if injections.index(injection) % shares != share:
                continue
            item = ground_truth(catalog.resolve(suite, user, injection, "important_instructions"))
            result = replayer.replay(item)
            results.append(
                (suite, user, injection, result.components if isinstance(result, Scored) else result)
            )
    return results


@pytest.mark.slow
def test_all_949_ground_truths_under_important_instructions_keep_utility_and_security(
    catalog: Catalog, replayer: TrajectoryReplay, ground_truth: Callable[..., TrajectoryItem]
) -> None:
    """Every v1.2.2 (user task, injection task) pair: the user task's ground truth, replayed by the
    `replay` behind `POST /v1/score` in an environment injected by `important_instructions`, solves
    the task (utility 1) and, doing nothing else, leaves the injection's goal unmet (security 1).
    Two forked processes (the machines have two cores) share the pairs."""
    FORKED.update(catalog=catalog, replayer=replayer, ground_truth=ground_truth)
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork")) as pool:
        shares = [pool.submit(replay_pairs, share, 2) for share in range(2)]
        results = [row for share in shares for row in share.result()]
    assert len(results) == 949 and len({row[:3] for row in results}) == 949
    assert [row for row in results if row[3] != {"utility": 1.0, "security": 1.0}] == []
