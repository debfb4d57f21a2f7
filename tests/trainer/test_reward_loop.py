"""TRL's reward loop at exit: no reward request is left on it to be finalized outside its loop.

TRL scores async reward columns on a daemon event loop and, at exit, only stops that loop. A request still in
flight then (a step cut short, the sibling of a failed column) stays frozen where it was, and the garbage
collector later closes it outside any loop; caught between its socket connecting and its next step, anyio's
connect cleanup raises `NoEventLoopError: Not currently running on any asynchronous event loop` (`_tasks.py`
`__new__`, `_eventloop.py` `get_async_backend`), the error a loaded machine showed. The test stops the loop in
exactly that window, runs the exit callbacks the trainer registered, and requires that nothing is left pending
on the loop.
"""

from __future__ import annotations

import asyncio
import atexit
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from anyio._backends._asyncio import AsyncIOBackend
from datasets import Dataset

from corrgrpo_testing.servers import start_service
from corrgrpo_trainer.rewards import ServiceRewards
from corrgrpo_trainer.tiny import build_tiny_policy
from corrgrpo_trainer.trl_trainer import CorrGRPOConfig, CorrGRPOTrainer

GROUND_TRUTH = '[{"name": "get_weather", "parameters": {"city": "Paris"}}]'


@pytest.fixture(scope="module")
def toolcall_url() -> Iterator[str]:
    with start_service("toolcall") as service:
        yield service.url


def stop_loop_once_connected(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The loop stops right after the next socket connects, before the request that opened it takes its next
    step."""
    connect, stops = AsyncIOBackend.connect_tcp.__func__, []

    async def connect_then_stop(cls: type, *args: Any, **kwargs: Any) -> Any:
        stream = await connect(cls, *args, **kwargs)
        if not stops:
            stops.append(1)
            asyncio.get_running_loop().stop()
        return stream

    monkeypatch.setattr(AsyncIOBackend, "connect_tcp", classmethod(connect_then_stop))
    return stops


def finalized_outside_the_loop(tasks: list[asyncio.Task[Any]]) -> str:
    """What closing each task's coroutine with no loop running raises, as the garbage collector would at
    exit."""
    errors = []
    for task in tasks:
        try:
            task.get_coro().close()
        except BaseException as error:  # reported in the failure, with the chain that led to it
            errors.append("".join(traceback.format_exception(error)))
    return "\n".join(errors)


@pytest.mark.slow
def test_a_request_caught_opening_its_connection_at_exit_is_closed_on_its_loop(
    toolcall_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build_tiny_policy(tmp_path / "policy")
    rewards = ServiceRewards.of_service(toolcall_url, ["format"])
    exit_callbacks: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []
    monkeypatch.setattr(
        atexit, "register", lambda func, *args, **kwargs: exit_callbacks.append((func, args, kwargs))
    )
    args = CorrGRPOConfig(
        output_dir=str(tmp_path / "out"),
        use_cpu=True,
        bf16=False,
        report_to="none",
        max_steps=1,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=4,
        reward_weights=rewards.column_weights,
        keep_rollouts=False,
        show_phases=False,
    )
    rows = [{"prompt": "What is the weather in Paris?", "ground_truth": GROUND_TRUTH}] * 4
    trainer = CorrGRPOTrainer(
        model=str(tmp_path / "policy"),
        reward_funcs=rewards.columns(),
        args=args,
        train_dataset=Dataset.from_list(rows),
    )
    loop, thread = trainer.async_loop, trainer.async_loop_thread
    stops = stop_loop_once_connected(monkeypatch)

    # A step's scoring as TRL submits it; the loop stops while the column's first request is opening its
    # connection.
    column = trainer.reward_funcs[0]
    scoring = asyncio.run_coroutine_threadsafe(
        column(prompts=["p"], completions=["c"], ground_truth=[GROUND_TRUTH]), loop
    )
    thread.join(60)
    assert stops and not thread.is_alive() and not scoring.done()  # the race window, held open

    for func, func_args, func_kwargs in reversed(exit_callbacks):  # interpreter exit: last registered first
        func(*func_args, **func_kwargs)
    left = [task for task in asyncio.all_tasks(loop) if not task.done()]
    assert not left, (
        f"{len(left)} request(s) left on the stopped loop; at exit:\n{finalized_outside_the_loop(left)}"
    )
    assert scoring.cancelled()  # the request was cancelled on its own loop, its connection closed there
