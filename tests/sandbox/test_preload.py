"""The caller's preloaded module files: imported once per worker under their own names, visible read-only, and
the only files of the caller's tree a run can see."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from corrgrpo_sandbox import Sandbox, docker_backend
from corrgrpo_sandbox.isolation import Launcher
from corrgrpo_sandbox.worker_handle import preload_mounts

MODULE = """
import os
LOADED_IN = os.getpid()  # the process that imported this module: the worker, not a run's child


def greet(name):
    return f"hello {name}"
"""


@pytest.fixture(scope="module")
def caller_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A caller's source tree: the module handed to the sandbox, a secret beside it and one in a subfolder."""
    tree = tmp_path_factory.mktemp("caller_tree")
    (tree / "greeting.py").write_text(MODULE)
    (tree / "secret.txt").write_text("beside the module")
    (tree / "package").mkdir()
    (tree / "package" / "config.py").write_text("TOKEN = 'inside the tree'\n")
    return tree


@pytest.fixture(scope="module", params=["pool", "fresh"])
def preloading(
    request: pytest.FixtureRequest, caller_tree: Path, new_isolated_sandbox: Callable[..., Sandbox]
) -> Iterator[Sandbox]:
    with new_isolated_sandbox(request.param, 1, preload=[caller_tree / "greeting.py"]) as sandbox:
        yield sandbox


def test_the_module_is_imported_before_the_run_and_once_per_worker(preloading: Sandbox) -> None:
    program = (
        "import json, os, sys\n"
        "preloaded = 'greeting' in sys.modules\n"  # before this program imports anything
        "import greeting\n"
        "print(json.dumps([preloaded, greeting.greet('run'), greeting.LOADED_IN, os.getpid(), "
        "greeting.__file__]))\n"
    )
    first, second = (json.loads(preloading.run(program).stdout) for _ in range(2))
    assert first[:2] == [True, "hello run"]
    assert first[2] != first[3]  # imported in the worker, which the run's child was forked from
    assert first[4] == "/opt/corrgrpo_preload/greeting.py"
    if preloading.mode == "pool":
        assert second[2] == first[2] and second[3] != first[3]  # the same worker's import, a new child


def test_a_run_sees_no_other_file_of_the_callers_tree(preloading: Sandbox, caller_tree: Path) -> None:
    paths = [str(caller_tree / name) for name in ("greeting.py", "secret.txt", "package/config.py")]
    program = (
        "import json, os\n"
        f"paths = {paths!r}\n"
        "print(json.dumps([[os.path.exists(p) for p in paths], os.path.exists(os.path.dirname(paths[0])),\n"
        "                  sorted(os.listdir('/opt/corrgrpo_preload'))]))\n"
    )
    result = preloading.run(program)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == [[False, False, False], False, ["greeting.py"]]


def test_the_preloaded_file_is_read_only(preloading: Sandbox) -> None:
    program = "open('/opt/corrgrpo_preload/greeting.py', 'a').write('TOKEN = 1\\n')"
    result = preloading.run(program)
    assert result.exit_code == 1 and b"Read-only file system" in result.stderr


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("notes.txt", "not a Python module file"),
        ("json.py", "is taken"),
        ("worker.py", "is taken"),
        ("a-b.py", "not a"),
    ],
)
def test_a_file_that_cannot_be_preloaded_is_refused(tmp_path: Path, name: str, why: str) -> None:
    (tmp_path / name).write_text("X = 1\n")
    with pytest.raises(ValueError, match=why):
        Sandbox("fresh", preload=[tmp_path / name], isolation="unsafe-none")


def test_two_files_of_one_module_name_are_refused(tmp_path: Path) -> None:
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "twin.py").write_text("X = 1\n")
    with pytest.raises(ValueError, match="is taken"):
        Sandbox(
            "fresh", preload=[tmp_path / "a" / "twin.py", tmp_path / "b" / "twin.py"], isolation="unsafe-none"
        )


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        Sandbox("fresh", preload=[tmp_path / "absent.py"], isolation="unsafe-none")


def test_docker_shows_each_preloaded_file_read_only_and_before_the_image(caller_tree: Path) -> None:
    """The docker command line, built as `start_worker` builds it (no engine needed): one read-only `-v`
    per file."""
    module = caller_tree / "greeting.py"
    launcher = Launcher(
        "docker",
        docker_backend.docker_head(512, 16),
        ("python3", "-I", "/opt/corrgrpo_sandbox/worker/__main__.py"),
        namespaced=True,
        scratch=("/tmp",),
        mount=docker_backend.docker_mount,
        seal=docker_backend.docker_seal("an-image"),
    )
    mounts, inside = preload_mounts(launcher, (module,))
    assert (mounts, inside) == (
        ["-v", f"{module}:/opt/corrgrpo_preload/greeting.py:ro"],
        ["/opt/corrgrpo_preload/greeting.py"],
    )
    argv = [*launcher.head, *mounts, *launcher.seal]
    assert argv.index(mounts[1]) < argv.index("an-image")
    # nothing else of the caller's tree
    assert [arg for arg in argv if str(caller_tree) in arg] == [mounts[1]]
