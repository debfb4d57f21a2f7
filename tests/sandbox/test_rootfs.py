"""A bwrap worker's files are tmpfs copies, always resident: no page a run reads is cold (issue 48.3).

A cold page is a bit between runs: one run makes it resident by reading it, a later one finds it resident.
Here every mount a run sees is a tmpfs, one fault on any file maps its whole 64 KiB window (all resident), and
the interpreter still has what its standard library needs. The copy itself: made once per uid and content,
refused where it is not on tmpfs or not this uid's alone."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from corrgrpo_sandbox import IsolationUnavailable, Sandbox, rootfs
from corrgrpo_sandbox.isolation import PACKAGE_DIR, bwrap_launcher
from corrgrpo_sandbox.rootfs import (
    ROOTFS_DIR_ENV,
    RootFsError,
    build_rootfs,
    checked_base,
    place,
    resident_copy,
    rootfs_base,
)

MOUNTS = """
import json
mounts = []
for line in open("/proc/self/mountinfo"):
    fields, _, rest = line.partition(" - ")
    mounts.append((fields.split()[4], rest.split()[0]))
files_in_dev = [
    os.path.join(directory, name)
    for directory, _, names in os.walk("/dev")
    for name in names
    if os.path.isfile(os.path.join(directory, name)) and not os.path.islink(os.path.join(directory, name))
]
print(json.dumps({"mounts": mounts, "files_in_dev": files_in_dev}))
"""
# One fault maps every resident page of its 64 KiB-aligned block (fault-around): with every page resident, a
# fault in each of k blocks (apart, inside the mapping) leaves k * 64 KiB of the file mapped (smaps walks the
# page tables; the process's own counters lag).
FAULTS = """
import ctypes, json, mmap, os, random
BLOCK = 16 * mmap.PAGESIZE

def mapped_kb(address):
    with open("/proc/self/smaps") as smaps:
        lines = iter(smaps.read().splitlines())
    for line in lines:
        if line.startswith(f"{address:x}-"):
            return next(int(entry.split()[1]) for entry in lines if entry.startswith("Rss:"))

short = []
for directory, dirs, names in os.walk("/"):
    dirs[:] = [name for name in dirs if os.path.join(directory, name) not in ("/proc", "/dev", "/tmp")]
    for name in names:
        path = os.path.join(directory, name)
        if os.path.islink(path) or os.path.getsize(path) < 12 * BLOCK:
            continue
        with open(path, "rb") as file:
            view = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_COPY)
        view.madvise(mmap.MADV_RANDOM)
        address = ctypes.addressof(ctypes.c_char.from_buffer(view))
        blocks = random.sample(range(2, len(view) // BLOCK - 2, 2), 3)
        for block in blocks:
            view[block * BLOCK - address % BLOCK + random.randrange(16) * mmap.PAGESIZE]
        if mapped_kb(address) != len(blocks) * BLOCK // 1024:
            short.append((path, mapped_kb(address)))
print(json.dumps(short[:20]))
"""
STDLIB = """
import bz2, ctypes, decimal, hashlib, lzma, sqlite3, ssl, subprocess, sys, threading, uuid, zlib
thread = threading.Thread(target=print, args=("thread",))
thread.start()
thread.join()
print(subprocess.run("echo shell", shell=True, capture_output=True, text=True).stdout.strip())
print(subprocess.run([sys.executable, "-c", "print('child')"], capture_output=True, text=True).stdout.strip())
answer = sqlite3.connect(":memory:").execute("select 6 * 7").fetchone()[0]
print(answer, ctypes.CDLL(None).getpid() == os.getpid())
sites = [path for path in sys.path if path.endswith("site-packages") and os.path.isdir(path)]
site_packages = any(os.listdir(path) for path in sites)
print(site_packages, os.path.exists("/usr/bin/ldd"))
"""


@pytest.fixture
def tmpfs_base(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private directory on /dev/shm (a tmpfs) as the copies' home."""
    base = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="corrgrpo-test-"))
    monkeypatch.setenv(ROOTFS_DIR_ENV, str(base))
    yield base
    shutil.rmtree(base)


def run_json(sandbox: Sandbox, source: str) -> object:
    result = sandbox.run(f"import os\n{source}")
    assert result.exit_code == 0, result.stderr.decode(errors="replace")
    return json.loads(result.stdout)


def test_every_mount_a_run_sees_is_a_tmpfs(pool_sandbox: Sandbox) -> None:
    found = run_json(pool_sandbox, MOUNTS)
    assert isinstance(found, dict)
    files = {point: kind for point, kind in found["mounts"] if not point.startswith(("/proc", "/dev/"))}
    assert {"/", "/usr", "/etc", "/opt/corrgrpo_sandbox"} <= set(files), files
    assert set(files.values()) == {"tmpfs"}, files
    # /dev holds device nodes alone, but for its /dev/shm tmpfs
    assert all(path.startswith("/dev/shm/") for path in found["files_in_dev"]), found["files_in_dev"]


def test_a_fault_on_any_file_a_run_sees_maps_its_whole_window(pool_sandbox: Sandbox) -> None:
    assert run_json(pool_sandbox, FAULTS) == []


def test_the_standard_library_works_from_the_copy(pool_sandbox: Sandbox) -> None:
    result = pool_sandbox.run(f"import os\n{STDLIB}")
    assert result.exit_code == 0, result.stderr.decode(errors="replace")
    assert result.stdout.decode().split("\n") == ["thread", "shell", "child", "42 True", "False False", ""]


def test_place_copies_a_file_at_its_path_with_the_symlinks_on_the_way(tmp_path: Path) -> None:
    (tmp_path / "real" / "lib").mkdir(parents=True)
    (tmp_path / "real" / "lib" / "libx.so.1.2").write_bytes(b"\x7fELF")
    (tmp_path / "real" / "lib" / "libx.so.1").symlink_to("libx.so.1.2")
    (tmp_path / "lib").symlink_to("real/lib")
    root = tmp_path / "root"
    place(tmp_path / "lib" / "libx.so.1", root)
    copy = root / tmp_path.relative_to("/")
    assert os.readlink(copy / "lib") == "real/lib"
    assert os.readlink(copy / "real" / "lib" / "libx.so.1") == "libx.so.1.2"
    assert (copy / "real" / "lib" / "libx.so.1.2").read_bytes() == b"\x7fELF"
    assert (copy / "lib" / "libx.so.1").read_bytes() == b"\x7fELF"


def test_the_copy_is_made_once_and_refused_when_others_could_change_it(tmpfs_base: Path) -> None:
    first = build_rootfs(sys.executable, PACKAGE_DIR)
    assert first.root.parent == first.package.parent == tmpfs_base
    assert (first.root / os.path.realpath(sys.executable).lstrip("/")).is_file()
    assert (first.package / "worker" / "__main__.py").is_file()
    site = [path for path in first.root.rglob("*") if "site-packages" in path.parts]
    assert [path.name for path in site] == ["site-packages"] and not any(site[0].iterdir())  # a mount point
    marker = first.root / "made-once"
    marker.touch()
    assert build_rootfs(sys.executable, PACKAGE_DIR) == first and marker.exists()  # found, not made again
    first.root.chmod(0o755)
    with pytest.raises(RootFsError, match="not this uid's alone"):
        build_rootfs(sys.executable, PACKAGE_DIR)


def test_a_preloaded_file_is_copied_by_content(tmpfs_base: Path, tmp_path: Path) -> None:
    module = tmp_path / "mod.py"
    module.write_text("X = 1\n")
    copy = resident_copy(module)
    assert copy.is_relative_to(tmpfs_base) and copy.read_text() == "X = 1\n"
    assert resident_copy(module) == copy
    module.write_text("X = 2\n")
    assert resident_copy(module) != copy and resident_copy(module).read_text() == "X = 2\n"


def test_a_base_that_is_not_a_tmpfs_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(RootFsError, match="on proc, not tmpfs"):
        checked_base(Path("/proc"))
    monkeypatch.setenv(ROOTFS_DIR_ENV, "/proc")
    with pytest.raises(IsolationUnavailable, match="not tmpfs"):
        bwrap_launcher.__wrapped__(sys.executable)


def test_a_noexec_tmpfs_is_passed_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Docker mounts its tmpfs noexec: the interpreter's copy could not run there, so the next base is
    taken."""
    noexec = tmp_path / "noexec"
    noexec.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "noexec,size=8m", "tmpfs", str(noexec)], check=True)
    try:
        with pytest.raises(RootFsError, match="mounted noexec"):
            checked_base(noexec)
        monkeypatch.delenv(ROOTFS_DIR_ENV, raising=False)
        monkeypatch.setattr(rootfs, "DEFAULT_ROOTFS_DIRS", (str(noexec), "/dev/shm"))
        assert rootfs_base(1 << 20) == Path("/dev/shm")
    finally:
        subprocess.run(["umount", str(noexec)], check=True)


def test_the_copy_goes_to_the_first_tmpfs_with_room(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ROOTFS_DIR_ENV, raising=False)
    monkeypatch.setattr(rootfs, "DEFAULT_ROOTFS_DIRS", ("/proc", "/dev/shm"))
    assert rootfs_base(1 << 20) == Path("/dev/shm")
    with pytest.raises(RootFsError, match=r"/proc is on proc, not tmpfs; /dev/shm has \d+ MiB free"):
        rootfs_base(1 << 50)


def test_only_the_named_pure_python_packages_are_importable() -> None:
    """sortedcontainers (named) imports from the copy; pip, in the same host site-packages, does not."""
    with Sandbox(workers=1, packages=("sortedcontainers",)) as sandbox:
        named = sandbox.run("from sortedcontainers import SortedList\nprint(list(SortedList([3, 1, 2])))")
        assert named.stdout == b"[1, 2, 3]\n", named.stderr.decode(errors="replace")
        other = sandbox.run("import pip")
        assert b"No module named 'pip'" in other.stderr
    with pytest.raises(IsolationUnavailable, match="'pydantic_core' is not pure Python"):
        Sandbox(workers=1, packages=("pydantic_core",), isolation="bwrap")
