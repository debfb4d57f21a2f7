"""The suite's tools as Python methods TRL can render and call, and a chat template that renders tool calls.

TRL renders a tool from its Python signature, type hints and Google-style docstring (transformers'
`get_json_schema`), so each tool schema the service serves becomes a method with exactly those. Calling it
runs the tool in the instance's episode (`_run_tool`, trl_environment.py).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Protocol, Union

QWEN_TOOL_TEMPLATE = "qwen2_5.jinja"  # TRL ships it and knows how to parse its <tool_call> blocks


_JSON_TYPES: dict[str, Any] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "object": dict,
}


class RunsTools(Protocol):
    """What a tool method calls: the environment's runner of one tool call in its episode."""

    def _run_tool(self, function: str, arguments: dict[str, Any]) -> str: ...


def type_hint(schema: dict[str, Any], definitions: dict[str, Any]) -> Any:
    """The Python type hint transformers' `get_json_schema` turns back into `schema` (the subset agentdojo
    uses)."""
    if "$ref" in schema:
        return type_hint(definitions[schema["$ref"].rsplit("/", 1)[-1]], definitions)
    if "enum" in schema:
        return Literal[tuple(schema["enum"])]
    if "anyOf" in schema:
        return Union[tuple(type_hint(option, definitions) for option in schema["anyOf"])]  # noqa: UP007
    kind = schema.get("type")
    if kind == "array":
        return list[type_hint(schema["items"], definitions)] if "items" in schema else list
    if kind == "null":
        return type(None)
    return _JSON_TYPES.get(kind, Any)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def tool_method(tool: dict[str, Any]) -> Callable[..., str]:
    """A method named after the tool whose signature, type hints and Google-style docstring describe its
    parameters (what TRL renders into the prompt). Calling it runs the tool in the episode."""
    function = tool["function"]
    name, parameters = function["name"], function.get("parameters", {})
    properties, required = parameters.get("properties", {}), set(parameters.get("required", []))
    definitions = parameters.get("$defs", {})

    def call(self: RunsTools, **arguments: Any) -> str:
        return self._run_tool(name, arguments)

    hints = {arg: type_hint(schema, definitions) for arg, schema in properties.items()}
    signature = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)] + [
        inspect.Parameter(
            arg,
            inspect.Parameter.KEYWORD_ONLY,
            annotation=hint,
            default=inspect.Parameter.empty if arg in required else None,
        )
        for arg, hint in hints.items()
    ]
    args_doc = "".join(
        f"\n    {arg}: {_one_line(schema.get('description') or schema.get('title') or arg)}"
        for arg, schema in properties.items()
    )
    call.__name__ = call.__qualname__ = name
    call.__signature__ = inspect.Signature(signature)  # type: ignore[attr-defined]
    call.__annotations__ = {**hints, "return": str}
    call.__doc__ = _one_line(function.get("description") or name) + (
        f"\n\nArgs:{args_doc}" if args_doc else ""
    )
    return call


def tool_calling_template(tokenizer: Any) -> None:
    """Give a tokenizer whose chat template cannot render tool calls TRL's Qwen2.5 template (ChatML with
    `<tool_call>` blocks, which TRL knows how to parse). ChatML tokenizers (SmolLM2, the tiny policy) fit
    it."""
    from trl.chat_template_utils import supports_tool_calling

    if supports_tool_calling(tokenizer):
        return
    import trl

    tokenizer.chat_template = (Path(trl.__file__).parent / "chat_templates" / QWEN_TOOL_TEMPLATE).read_text()
