"""A config key the trainer does not know is refused, never ignored: a misspelt setting would train with its
default.

`read_config` alone (no training starts), at the top level, in a nested section and from a `--set`."""

from __future__ import annotations

from pathlib import Path

import pytest

from corrgrpo_trainer.config import InputError, read_config

from .test_config import write_config


@pytest.mark.parametrize(
    ("edit", "overrides", "key"),
    [
        (("estimator: corrgrpo", "estimater: corrgrpo"), [], "estimater"),
        (None, ["services.toolcall.client.timout=3"], "services.toolcall.client.timout"),
    ],
    ids=["in-the-file", "from-a-set"],
)
def test_an_unknown_key_is_refused_naming_it(
    tmp_path: Path, edit: tuple[str, str] | None, overrides: list[str], key: str
) -> None:
    # the control: the shipped config reads
    assert read_config(write_config(tmp_path)).estimator == "corrgrpo"
    with pytest.raises(InputError, match=f"unknown key '{key}'"):
        read_config(write_config(tmp_path, edit=edit), overrides=overrides)
