"""The mutation suite's catalogue against the tree as it is (fast: nothing is run). A refactor that moves a
guarded line fails here, in `make test`, naming the mutant whose snippet to update; `make mutants` runs the
mutants."""

from __future__ import annotations

from pathlib import Path

import pytest

from .run import REPO, Mutant, check, load, tree_files


def test_every_snippet_is_in_its_file_once_and_every_named_test_file_exists() -> None:
    mutants = load()
    assert len(mutants) >= 40
    assert check(mutants, *tree_files()) == []


def test_every_mutant_names_its_guarantee_and_file_inside_the_repository() -> None:
    for mutant in load():
        assert mutant.guarantee.strip() and (REPO / mutant.file).resolve().is_relative_to(REPO), mutant.name


def test_a_snippet_not_found_exactly_once_fails_loudly(tmp_path: Path) -> None:
    (tmp_path / "code.py").write_text("x = 1\nx = 1\ny = 2\n")
    Mutant("once", "g", "code.py", "y = 2", "y = 3", ("t",)).apply(tmp_path)
    assert (tmp_path / "code.py").read_text() == "x = 1\nx = 1\ny = 3\n"
    for old in ("x = 1", "z = 0"):
        with pytest.raises(ValueError, match="not once"):
            Mutant("moved", "g", "code.py", old, "x = 2", ("t",)).apply(tmp_path)
