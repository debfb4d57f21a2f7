"""The curated mutation suite: every mutant of mutants.toml must be killed by the tests it names.

Each mutant is a declared edit (one exact snippet of one file, found exactly once, replaced) applied to its
own scratch copy of the tree (the tracked and untracked-not-ignored files), where only its tests run, with the
copy's parts first on PYTHONPATH so that they, not the editable installs of this checkout, are the code under
test. A mutant is killed when pytest reports a failed test (exit 1); one that passes survives, and any other
outcome (snippet not found once, no such test, a collection error, a timeout) is an error. A baseline job runs
every named test on an unmutated copy: it must pass with nothing skipped, or no kill means anything.

    python tests/mutants/run.py [--jobs N] [--check] [--no-baseline] [--rev COMMIT] [NAME ...]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[2]
CATALOGUE = Path(__file__).with_name("mutants.toml")
TIMEOUT_S = 600
# Fields of a [[mutant]] entry, all required.
FIELDS = {"name", "guarantee", "file", "old", "new", "tests"}


@dataclass(frozen=True)
class Mutant:
    name: str
    guarantee: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]

    def apply(self, root: Path) -> None:
        """Edit `file` under root; ValueError when `old` is not there exactly once (the guarantee moved)."""
        path = root / self.file
        if not path.is_file():
            raise ValueError(f"{self.name}: {self.file} does not exist")
        text = path.read_text()
        count = text.count(self.old)
        if count != 1:
            raise ValueError(
                f"{self.name}: the snippet occurs {count} times in {self.file}, not once:\n{self.old}"
            )
        path.write_text(text.replace(self.old, self.new))


@dataclass(frozen=True)
class Outcome:
    name: str
    status: str  # killed | survived | error
    seconds: float
    detail: str = ""


def load(catalogue: Path = CATALOGUE) -> list[Mutant]:
    """The declared mutants; ValueError naming an entry with missing or unknown fields, or a repeated name."""
    mutants = []
    for entry in tomllib.loads(catalogue.read_text())["mutant"]:
        if set(entry) != FIELDS:
            raise ValueError(
                f"mutant {entry.get('name')!r}: fields {sorted(entry)}, expected {sorted(FIELDS)}"
            )
        if entry["old"] == entry["new"] or not entry["tests"]:
            raise ValueError(f"mutant {entry['name']!r}: changes nothing or names no test")
        mutants.append(Mutant(**{**entry, "tests": tuple(entry["tests"])}))
    names = [mutant.name for mutant in mutants]
    if repeated := {name for name in names if names.count(name) > 1}:
        raise ValueError(f"mutant names repeated: {sorted(repeated)}")
    return mutants


def tree_files(rev: str | None = None, unpack_into: Path | None = None) -> tuple[Path, list[str]]:
    """The folder the scratch copies are made from and its files: the checkout as a clone plus the work in
    progress would have it (deleted files left out), or commit `rev` alone, unpacked into `unpack_into`."""
    if rev is None:
        command = ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
        listed = subprocess.run(command, cwd=REPO, check=True, capture_output=True).stdout.decode()
        return REPO, [name for name in listed.split("\0") if name and (REPO / name).is_file()]
    assert unpack_into is not None
    unpack_into.mkdir()
    archive = subprocess.run(["git", "archive", rev], cwd=REPO, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(unpack_into)], input=archive, check=True)
    return unpack_into, sorted(
        str(path.relative_to(unpack_into)) for path in unpack_into.rglob("*") if path.is_file()
    )


def scratch_copy(source: Path, files: list[str], into: Path) -> Path:
    for name in files:
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / name, target, follow_symlinks=False)
    return into


def environment(root: Path) -> dict[str, str]:
    """The copy's parts (every folder with a pyproject.toml) ahead of the editable installs, which point
    here."""
    parts = sorted(str(path.parent) for path in root.glob("**/pyproject.toml") if "bench" not in path.parts)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([*parts, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    }
    # The tests find ../shared/data beside the repository: beside this checkout, not beside the copy.
    env.setdefault("CORRGRPO_SHARED_DATA", str(REPO.parent / "shared" / "data"))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


# Plugins installed with the venv's other packages that no mutant's tests use: half of pytest's start-up.
UNUSED_PLUGINS = ("cacheprovider", "langsmith_plugin", "schemathesis")


def pytest_command(tests: list[str], *extra: str) -> list[str]:
    plugins = [arg for name in UNUSED_PLUGINS for arg in ("-p", f"no:{name}")]
    return [sys.executable, "-m", "pytest", "-q", "-x", *plugins, *extra, *tests]


def imported_from(root: Path, env: dict[str, str]) -> str:
    """'' when every part's package imports from the copy, else the ones that do not (the mutants would
    miss)."""
    packages = [path.parent.name for path in root.glob("*/corrgrpo_*/__init__.py")]
    packages += [path.parent.name for path in root.glob("services/*/corrgrpo_*/__init__.py")]
    script = (  # found, not imported: an adapter's package needs its stack, which .venv lacks
        "import importlib.util\n"
        f"for name in {sorted(packages)!r}:\n"
        "    path = importlib.util.find_spec(name).origin\n"
        f"    if not path.startswith({str(root)!r}): print(name, path)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=root, env=env, capture_output=True, text=True)
    return (done.stdout + done.stderr).strip()


def baseline(source: Path, files: list[str], tests: list[str], workdir: Path) -> Outcome:
    start = time.monotonic()
    root = scratch_copy(source, files, workdir / "baseline")
    env = environment(root)
    if wrong := imported_from(root, env):
        return Outcome(
            "baseline", "error", time.monotonic() - start, f"parts not imported from the copy: {wrong}"
        )
    report = workdir / "baseline.xml"
    done = run_pytest(pytest_command(tests, f"--junitxml={report}"), root, env)
    seconds = time.monotonic() - start
    if isinstance(done, str) or done.returncode != 0:
        return Outcome("baseline", "error", seconds, done if isinstance(done, str) else tail(done.stdout))
    suite = ElementTree.parse(report).getroot().iter("testsuite")
    skipped = sum(int(node.get("skipped", "0")) for node in suite)
    if skipped:
        return Outcome("baseline", "error", seconds, f"{skipped} named tests skipped:\n{tail(done.stdout)}")
    return Outcome("baseline", "passed", seconds)


def run_pytest(command: list[str], root: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str] | str:
    try:
        return subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"timed out after {TIMEOUT_S} s"


def failed_tests(output: str) -> str:
    """The tests that failed, as pytest's short summary names them (`-ra` in pytest.ini)."""
    summary = (line.split(" - ")[0] for line in output.splitlines() if line.startswith(("FAILED ", "ERROR ")))
    return "\n".join(line for line in summary if "::" in line)


def tail(output: str, lines: int = 15) -> str:
    return "\n".join(output.strip().splitlines()[-lines:])


def run_mutant(mutant: Mutant, source: Path, files: list[str], workdir: Path) -> Outcome:
    start = time.monotonic()
    root = scratch_copy(source, files, workdir / mutant.name)
    try:
        mutant.apply(root)
    except ValueError as error:
        return Outcome(mutant.name, "error", time.monotonic() - start, str(error))
    done = run_pytest(pytest_command(list(mutant.tests)), root, environment(root))
    seconds = time.monotonic() - start
    shutil.rmtree(root, ignore_errors=True)
    if isinstance(done, str):
        return Outcome(mutant.name, "error", seconds, done)
    status = {0: "survived", 1: "killed"}.get(done.returncode, "error")
    return Outcome(
        mutant.name, status, seconds, failed_tests(done.stdout) if status == "killed" else tail(done.stdout)
    )


def check(mutants: list[Mutant], source: Path, files: list[str]) -> list[str]:
    """Problems with the catalogue against a tree: snippets not found exactly once, missing test files."""
    problems = []
    for mutant in mutants:
        text = (source / mutant.file).read_text() if mutant.file in files else ""
        if (count := text.count(mutant.old)) != 1:
            problems.append(f"{mutant.name}: the snippet occurs {count} times in {mutant.file}")
        problems += [
            f"{mutant.name}: no test file {test}" for test in mutant.tests if test.split("::")[0] not in files
        ]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="run only these mutants (default: all)")
    parser.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1, help="mutants run at once (default: cores)"
    )
    parser.add_argument(
        "--check", action="store_true", help="only check that every snippet and test file is there"
    )
    parser.add_argument(
        "--no-baseline", action="store_true", help="skip the unmutated run (while writing a mutant)"
    )
    parser.add_argument(
        "--rev", help="mutate this commit alone, not the work tree (others' edits in progress)"
    )
    args = parser.parse_args(argv)
    mutants = load()
    if unknown := set(args.names) - {mutant.name for mutant in mutants}:
        parser.error(f"no such mutants: {sorted(unknown)}")
    mutants = [mutant for mutant in mutants if not args.names or mutant.name in args.names]
    tests = sorted({test for mutant in mutants for test in mutant.tests})
    start = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="corrgrpo-mutants-") as work,
        ThreadPoolExecutor(args.jobs) as pool,
    ):
        workdir = Path(work)
        source, files = tree_files(args.rev, workdir / "source")
        if problems := check(mutants, source, files):
            print("\n".join(problems), file=sys.stderr)
            return 1
        if args.check:
            print(f"{len(mutants)} mutants: every snippet found once, every test file there")
            return 0
        futures = [] if args.no_baseline else [pool.submit(baseline, source, files, tests, workdir)]
        futures += [pool.submit(run_mutant, mutant, source, files, workdir) for mutant in mutants]
        outcomes = []
        for future in as_completed(futures):
            outcome = future.result()
            outcomes.append(outcome)
            print(f"{outcome.status:8} {outcome.seconds:6.1f} s  {outcome.name}", flush=True)
            if outcome.detail:
                print("    " + outcome.detail.replace("\n", "\n    "), flush=True)
    bad = [outcome.name for outcome in outcomes if outcome.status not in ("killed", "passed")]
    killed = sum(outcome.status == "killed" for outcome in outcomes)
    print(f"{killed}/{len(mutants)} mutants killed in {time.monotonic() - start:.0f} s with {args.jobs} jobs")
    if bad:
        print(f"not killed (or the baseline failed): {', '.join(bad)}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
