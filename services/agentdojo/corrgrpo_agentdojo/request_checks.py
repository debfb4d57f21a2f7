"""What every episode request is checked against before it touches an episode: its spec resolved in the
catalog, its calls read (from a raw completion when it has one) and bounded. `EpisodeError` is the refusal the
routes answer."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from corrgrpo_proto.agentdojo import EpisodeSpec, StepRequest, ToolCall, TrajectoryItem

from .catalog import Catalog, Resolved, UnknownTask
from .tool_calls import ToolCallError, read_completion


@dataclass
class EpisodeError(Exception):
    """A request the service refuses: HTTP status, machine-readable code, message, the offending field's
    path."""

    status: int
    code: str
    message: str
    loc: str | None = None
    retry_after_s: int | None = None


def malformed(completion: str, calls: Sequence[ToolCall | ToolCallError]) -> str | None:
    """Why one generated message breaks the authors' format check (every `<tool_call>` closed and read), or
    None."""
    opened, closed = completion.count("<tool_call>"), completion.count("</tool_call>")
    if opened != closed:
        return f"{opened} <tool_call> but {closed} </tool_call> tags"
    unreadable = next((call for call in calls if isinstance(call, ToolCallError)), None)
    return None if unreadable is None else f"ToolCallError: {unreadable}"


def resolve_spec(catalog: Catalog, spec: EpisodeSpec) -> tuple[Resolved, EpisodeSpec]:
    """The spec's tasks, and the spec with its defaults filled in (the attack); 422 `unknown_task` if it
    names none."""
    try:
        resolved = catalog.resolve(spec.suite, spec.user_task, spec.injection_task, spec.attack)
    except UnknownTask as error:
        raise EpisodeError(422, "unknown_task", str(error)) from error
    suite, user, injection, attack = resolved.key
    return resolved, EpisodeSpec(suite=suite, user_task=user, injection_task=injection, attack=attack)


def check_budget(calls: int, limit: int) -> None:
    if calls > limit:
        raise EpisodeError(
            422, "too_many_tool_calls", f"{calls} tool calls exceed the limit of {limit} per episode"
        )


def check_arguments(calls: Sequence[ToolCall | ToolCallError], where: str, limit: int) -> None:
    """422 with the argument's path when one is longer than `limit` (`agentdojo_max_arg_chars`, as JSON)."""
    for index, call in enumerate(calls):
        if isinstance(call, ToolCallError):
            continue
        for name, value in call.args.items():
            size = len(value) if isinstance(value, str) else len(json.dumps(value))
            if size > limit:
                loc = f"{where}.{index}.args.{name}"
                raise EpisodeError(
                    422, "argument_too_long", f"{loc}: {size} chars, the limit is {limit}", loc
                )


def calls_of(
    request: StepRequest | TrajectoryItem, max_arg_chars: int
) -> tuple[list[ToolCall | ToolCallError], str | None, str | None]:
    """The request's calls (read from its raw `completion` when it has one), that completion's answer and why
    it is malformed (`malformed`; unknown tools are found when the calls run)."""
    if request.completion is None:
        calls: list[ToolCall | ToolCallError] = list(request.tool_calls or [])
        check_arguments(calls, "tool_calls", max_arg_chars)
        return calls, None, None
    read = read_completion(request.completion)
    check_arguments(read.calls, "completion.tool_calls", max_arg_chars)
    return read.calls, read.answer, malformed(request.completion, read.calls)
