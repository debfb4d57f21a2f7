"""YAML text of the deployment files' data, laid out as they are read: block mappings, a list indented under
its key, short leaves in flow style (`Flow`, `FlowList`), double quotes where a string needs quotes, comments
above a document, and references to what the hand-written part of a file defines (`Alias`, `MERGE`: compose's
`<<: *service`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.events import AliasEvent
from yaml.nodes import Node, ScalarNode

WIDTH = 1000  # a line is never folded: the files are diffed and grepped by line


class Flow(dict[str, Any]):
    """A mapping written on one line: `{name: http, port: 8101}`."""


class FlowList(list[Any]):
    """A list written on one line: `[python, -m, corrgrpo_code]`."""


@dataclass(frozen=True)
class Alias:
    """`*name`: a reference to an anchor the file's hand-written part defines."""

    name: str


class _Merge:
    """The merge key `<<` (plain, so that it merges; a quoted one would be a key named `<<`)."""


MERGE = _Merge()


class _AliasNode(ScalarNode):
    pass


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True  # a value used twice is written twice, never as `&id001` and `*id001`

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)  # `key:\n  - item`, not `key:\n- item`

    def choose_scalar_style(self) -> str:
        style = super().choose_scalar_style()
        return '"' if style == "'" else style  # `"8101"`, as compose's and Kubernetes' docs quote

    def serialize_node(self, node: Node, parent: Node | None, index: Any) -> None:
        if isinstance(node, _AliasNode):
            self.emit(AliasEvent(node.value))
        else:
            super().serialize_node(node, parent, index)


_Dumper.add_representer(
    Flow, lambda dumper, data: dumper.represent_mapping("tag:yaml.org,2002:map", data, flow_style=True)
)
_Dumper.add_representer(
    FlowList, lambda dumper, data: dumper.represent_sequence("tag:yaml.org,2002:seq", data, True)
)
_Dumper.add_representer(Alias, lambda _, data: _AliasNode("tag:yaml.org,2002:str", data.name))
_Dumper.add_representer(_Merge, lambda _, __: ScalarNode("tag:yaml.org,2002:merge", "<<"))


def comment(text: str) -> str:
    """`text` as YAML comment lines."""
    return "".join(f"# {line}\n" if line else "#\n" for line in text.splitlines())


def dump(data: Any, above: str = "") -> str:
    """`data` as a YAML document, `above` as the comment over it."""
    return comment(above) + yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=WIDTH, allow_unicode=True)


def dump_all(documents: Iterable[tuple[str, Any]]) -> str:
    """(comment, data) pairs as one multi-document file."""
    return "---\n".join(dump(data, above) for above, data in documents)
