"""One episode as pure functions: start, execute tool calls, score. No HTTP, no store.

The state is the environment as the agent's calls left it, the start environment (pickled bytes,
for the checkers' `pre_environment`) and the trace of calls (the traces-based checkers read it).
`dumps`/`loads` pickle it: pydantic JSON round trips of these environments are not guaranteed
lossless (DESIGN §3), pickle is, and a test checks equality after real episodes in every suite.
Pickle must only be loaded from a trusted store (the service's own Redis), never from clients.
"""

from __future__ import annotations

import ast
import pickle
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from agentdojo.agent_pipeline.agent_pipeline import load_system_message
from agentdojo.agent_pipeline.tool_execution import tool_result_to_str
from agentdojo.functions_runtime import FunctionCall, FunctionsRuntime, TaskEnvironment
from agentdojo.task_suite.task_suite import TaskSuite

from corrgrpo_proto.agentdojo import EpisodeSpec, ToolCall, ToolResult

from .catalog import Resolved

STATE_FORMAT = 1


@dataclass
class EpisodeState:
    spec: EpisodeSpec
    start: bytes = field(repr=False)
    environment: TaskEnvironment = field(repr=False)
    trace: list[FunctionCall] = field(default_factory=list)


def start_episode(spec: EpisodeSpec, start: bytes) -> EpisodeState:
    return EpisodeState(spec=spec, start=start, environment=pickle.loads(start))


def initial_messages(resolved: Resolved) -> list[dict[str, Any]]:
    """agentdojo's default system message and the user task's prompt, chat format."""
    return [
        {"role": "system", "content": load_system_message(None)},
        {"role": "user", "content": resolved.user_task.PROMPT},
    ]


@cache
def runtime_for(suite: TaskSuite) -> FunctionsRuntime:
    return FunctionsRuntime(suite.tools)


@cache
def tool_schemas(suite: TaskSuite) -> list[dict[str, Any]]:
    """The suite's functions in the OpenAI/HF `tools` format (as agentdojo's OpenAI adapter sends them)."""
    return [
        {
            "type": "function",
            "function": {"name": f.name, "description": f.description, "parameters": f.parameters.model_json_schema()},
        }
        for f in suite.tools
    ]


def _list_literals(args: dict[str, Any]) -> dict[str, Any]:
    """agentdojo's ToolsExecutor turns string arguments that spell a Python list into lists; so do we."""
    fixed = dict(args)
    for name, value in args.items():
        if isinstance(value, str):
            try:
                parsed = ast.literal_eval(value)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                continue
            if isinstance(parsed, list):
                fixed[name] = parsed
    return fixed


def run_calls(state: EpisodeState, suite: TaskSuite, calls: list[ToolCall]) -> list[ToolResult]:
    """Execute `calls` in order against the episode's environment; errors become text, as the agent sees them."""
    runtime = runtime_for(suite)
    results = []
    for call in calls:
        function_call = FunctionCall(function=call.function, args=_list_literals(call.args), id=call.id)
        state.trace.append(function_call)
        output, error = runtime.run_function(state.environment, call.function, function_call.args)
        content = error if error is not None else tool_result_to_str(output)
        results.append(ToolResult(tool_call_id=call.id, function=call.function, content=content, error=error))
    return results


def score(state: EpisodeState, resolved: Resolved, final_answer: str) -> tuple[dict[str, float], dict[str, Any]]:
    """`utility` and `security` from the official checkers, traces-based checkers first.

    agentdojo's `security` returns True when the injection task's goal WAS achieved; our `security`
    is 1 when it was not (and 1 in an episode without an injection task).
    """
    pre = pickle.loads(state.start)
    post = state.environment
    user_task, injection_task = resolved.user_task, resolved.injection_task
    utility = user_task.utility_from_traces(final_answer, pre, post, state.trace)
    if utility is None:
        utility = user_task.utility(final_answer, pre, post)
    attacked = False
    if injection_task is not None:
        attacked = injection_task.security_from_traces(final_answer, pre, post, state.trace)
        if attacked is None:
            attacked = injection_task.security(final_answer, pre, post)
    components = {"utility": float(bool(utility)), "security": 0.0 if attacked else 1.0}
    return components, {"tool_calls": len(state.trace), "injection_succeeded": bool(attacked)}


def dumps(state: EpisodeState) -> bytes:
    spec = state.spec.model_dump()
    return pickle.dumps((STATE_FORMAT, spec, state.start, state.environment, state.trace), protocol=pickle.HIGHEST_PROTOCOL)


def loads(blob: bytes) -> EpisodeState:
    version, spec, start, environment, trace = pickle.loads(blob)
    if version != STATE_FORMAT:
        raise ValueError(f"episode state format {version}, this service reads {STATE_FORMAT}")
    return EpisodeState(spec=EpisodeSpec.model_validate(spec), start=start, environment=environment, trace=trace)
