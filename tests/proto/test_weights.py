"""`resolve_weights`: the one weighting rule of every path (services, trainer, adapters)."""

from __future__ import annotations

import pytest

from corrgrpo_proto import ComponentSpec, resolve_weights

SPECS = [
    ComponentSpec(name=name, min=0, max=1, weight=weight)
    for name, weight in (("a", 0.6), ("b", 0.3), ("c", 0.1))
]


def test_declared_weights_are_the_default_and_overrides_replace_some() -> None:
    assert resolve_weights(SPECS) == {"a": 0.6, "b": 0.3, "c": 0.1}
    assert resolve_weights(SPECS, {"b": 2}) == {"a": 0.6, "b": 2.0, "c": 0.1}


def test_components_not_trained_weigh_zero_so_the_total_is_the_trained_sum() -> None:
    assert resolve_weights(SPECS, {"c": 5.0}, only=["c", "a"]) == {"a": 0.6, "b": 0.0, "c": 5.0}


@pytest.mark.parametrize(("overrides", "only"), [({"nope": 1.0}, None), (None, ["a", "nope"])])
def test_an_unknown_component_is_named(overrides: dict[str, float] | None, only: list[str] | None) -> None:
    with pytest.raises(KeyError, match="nope"):
        resolve_weights(SPECS, overrides, only)
