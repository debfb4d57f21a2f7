"""A bwrap worker's files, copied once per host and uid onto a tmpfs, so that every one is always resident.

Why: the host's page cache is shared by every run. Where a run could see a host file with cold pages, it could
make one resident by reading it and a later run could find it resident (fault-around on a mapping, or the time
of a read): bits across runs. Pages of a tmpfs file are never dropped from memory (only swapped out, see the
README), so the worker's root holds copies on tmpfs alone: the real interpreter, the shared objects it and its
extension modules load (as the dynamic loader resolves them), the standard library without its tests and GUI,
the caller's pure-Python packages it names (at the interpreter's site-packages), the sandbox package and a few
/etc files. Each copy's directory is named by the uid and a digest of what went in (paths, sizes and
modification times; the packages' contents), built aside, renamed into place and shared by all sandboxes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOTFS_DIR_ENV = "CORRGRPO_SANDBOX_ROOTFS_DIR"  # a directory on a tmpfs where the copies are kept
# the first on a tmpfs with room (a container's /dev/shm has 64 MiB)
DEFAULT_ROOTFS_DIRS = ("/dev/shm", "/tmp")
PREFIX = "corrgrpo-rootfs-"
SKIPPED_DIRS = frozenset(
    {
        "site-packages",
        "test",
        "tests",
        "idle_test",
        "idlelib",
        "tkinter",
        "turtledemo",
        "ensurepip",
    }
)
SKIPPED_MODULES = ("_tkinter",)  # its shared libraries (Tk, X11) are what tkinter would need
ETC_FILES = ("/etc/ld.so.cache", "/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/localtime")
SHELL = "/bin/sh"  # os.system, subprocess's shell=True
# loaded by name, so ldd does not list them: by the C library (libgcc_s at pthread_exit), by programs through
# ctypes (the C library's other parts)
RUNTIME_LIBRARIES = (
    "libgcc_s.so.1",
    "libm.so.6",
    "libpthread.so.0",
    "libdl.so.2",
    "librt.so.1",
    "libutil.so.1",
    "libresolv.so.2",
    "libanl.so.1",
    "libmvec.so.1",
    "libnss_files.so.2",
    "libnss_dns.so.2",
)
# ldd's lines: "libc.so.6 => /lib/.../libc.so.6 (0x...)", or the loader's path alone
LOADED = re.compile(r"(/\S+) \(0x[0-9a-f]+\)$")
PROBE = (
    "import json, sys, sysconfig; print(json.dumps([sysconfig.get_path('stdlib'), "
    "sysconfig.get_config_var('DESTSHARED'), sys.implementation.cache_tag, sysconfig.get_path('purelib')]))"
)


class RootFsError(RuntimeError):
    """The copy cannot be made here. The message says why and what to do."""


@dataclass(frozen=True)
class RootFs:
    """A finished copy: `root` mirrors the host's paths, `package` is the sandbox package, `site` the caller's
    pure-Python packages, bound at the interpreter's `purelib` directory."""

    root: Path
    package: Path
    site: Path | None = None
    purelib: Path | None = None

    def bwrap_args(self, inside_package: str) -> tuple[str, ...]:
        """Options that make the copy the worker's file system (on bwrap's tmpfs root, read-only later)."""
        args: list[str] = []
        for entry in sorted(self.root.iterdir()):
            if entry.is_symlink():
                args += ["--symlink", os.readlink(entry), f"/{entry.name}"]
            else:
                args += ["--ro-bind", str(entry), f"/{entry.name}"]
        if self.site and self.purelib:
            args += ["--ro-bind", str(self.site), str(self.purelib)]
        return (*args, "--ro-bind", str(self.package), inside_package)

    def size_bytes(self) -> int:
        tops = (self.root, self.package, *([self.site] if self.site else []))
        return sum(path.lstat().st_size for top in tops for path in walk(top))


def walk(top: Path) -> Iterator[Path]:
    for directory, _, files in os.walk(top):
        for name in files:
            yield Path(directory, name)


def mount_of(path: Path) -> tuple[str, set[str]]:
    """The file system type and mount options of the mount that holds `path` (from /proc/self/mountinfo)."""
    path = Path(os.path.realpath(path))
    best, kind, options = Path("/"), "", set()
    with open("/proc/self/mountinfo") as mounts:
        for line in mounts:
            fields, _, rest = line.partition(" - ")
            point = Path(fields.split()[4].encode().decode("unicode_escape"))
            if path.is_relative_to(point) and len(point.parts) >= len(best.parts):
                best, kind, options = point, rest.split()[0], set(fields.split()[5].split(","))
    return kind, options


def python_paths(python: str) -> tuple[Path, Path, str, Path]:
    """The standard library, extension module directory, cache tag and `purelib` of the interpreter
    `python`."""
    done = subprocess.run([python, "-I", "-c", PROBE], capture_output=True, timeout=60, check=False, env={})
    if done.returncode != 0:
        error = done.stderr.decode(errors="replace")[-300:]
        raise RootFsError(f"{python} could not report its paths: {error}")
    stdlib, dynload, tag, purelib = json.loads(done.stdout)
    return Path(stdlib), Path(dynload), tag, Path(purelib)


def stdlib_files(stdlib: Path, dynload: Path, tag: str) -> list[Path]:
    """The standard library's files a program may import: no tests, GUI, site-packages or -O caches."""
    files = []
    for directory, dirs, names in os.walk(stdlib):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.startswith("config-"))
        here = Path(directory)
        for name in sorted(names):
            if here.name == "__pycache__" and not name.endswith(f".{tag}.pyc"):
                continue  # optimized (-O) caches: the worker runs without -O
            if here == dynload and name.startswith(SKIPPED_MODULES):
                continue
            files.append(here / name)
    return files


def loaded_objects(objects: list[Path]) -> list[Path]:
    """Every shared object the dynamic loader maps for `objects` (ldd's resolution, the loader included)."""
    done = subprocess.run(["ldd", *map(str, objects)], capture_output=True, timeout=120, check=False, env={})
    if not done.stdout:
        raise RootFsError(f"ldd failed: {done.stderr.decode(errors='replace')[-300:]}")
    lines = done.stdout.decode().splitlines()
    found = {Path(match.group(1)) for line in lines if (match := LOADED.search(line))}
    libc = [path.parent for path in found if path.name.startswith("libc.so")]
    beside_libc = [directory / name for directory in libc for name in RUNTIME_LIBRARIES]
    return sorted(found | {path for path in beside_libc if path.exists()})


def needed_files(python: str) -> tuple[list[Path], Path]:
    """The host paths a worker of `python` needs, symlinks as named (their targets follow when copied), and
    the real interpreter's `purelib` (not a venv's), where the caller's packages are shown."""
    binary = Path(os.path.realpath(python))
    stdlib, dynload, tag, purelib = python_paths(str(binary))
    library = stdlib_files(stdlib, dynload, tag)
    shell = [Path(SHELL)] if Path(SHELL).exists() else []
    objects = [binary, *shell, *(path for path in library if path.parent == dynload and path.suffix == ".so")]
    etc = [Path(name) for name in ETC_FILES if Path(name).exists()]
    return sorted({binary, *shell, *library, *loaded_objects(objects), *etc}), purelib


def place(path: Path, root: Path) -> None:
    """Copy `path` into `root` at the same absolute path, with each symlink on the way (and its target)."""
    parts = path.parts[1:]
    current = Path("/")
    for index, part in enumerate(parts):
        current = current / part
        copy = root / current.relative_to("/")
        if current.is_symlink():
            link = os.readlink(current)
            if not copy.is_symlink():
                copy.parent.mkdir(parents=True, exist_ok=True)
                os.symlink(link, copy)
            place(Path(os.path.normpath(os.path.join(current.parent, link, *parts[index + 1 :]))), root)
            return
    if not copy.exists():
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(current, copy)  # the modification time kept: the stdlib's caches stay valid


def digest(files: list[Path]) -> str:
    """Names a copy by what goes into it: each file's path, size and modification time."""
    hashed = hashlib.sha256()
    for path in files:
        status = path.stat()
        hashed.update(f"{path}\0{os.path.realpath(path)}\0{status.st_size}\0{status.st_mtime_ns}\n".encode())
    return hashed.hexdigest()[:24]


def content_digest(top: Path) -> str:
    """Names a copy of a small tree by its files' names and contents (a package in development changes)."""
    hashed = hashlib.sha256()
    for path in sorted(walk(top)):
        hashed.update(f"{path.relative_to(top)}\0".encode() + hashlib.sha256(path.read_bytes()).digest())
    return hashed.hexdigest()[:24]


def checked_base(base: Path) -> Path:
    if not base.is_dir():
        raise RootFsError(f"{base} is not a directory")
    kind, options = mount_of(base)
    if kind != "tmpfs":
        raise RootFsError(f"{base} is on {kind or 'an unknown file system'}, not tmpfs")
    if "noexec" in options:  # docker's tmpfs mounts are, unless mounted with `exec`
        raise RootFsError(f"{base} is mounted noexec: the interpreter's copy could not run there")
    return base


def owned(path: Path) -> bool:
    """Made by this uid and open to no other: anything else under a shared /dev/shm may have been planted."""
    status = path.lstat()
    private = status.st_uid == os.geteuid() and status.st_mode & 0o077 == 0
    return path.is_dir() and not path.is_symlink() and private


def rootfs_base(size: int) -> Path:
    """Where `size` bytes of copies go: the directory named in the environment, else a default with room."""
    named = os.environ.get(ROOTFS_DIR_ENV)
    reasons = []
    for candidate in [named] if named else DEFAULT_ROOTFS_DIRS:
        try:
            base = checked_base(Path(candidate))
        except RootFsError as error:
            reasons.append(str(error))
            continue
        free = shutil.disk_usage(base).free
        if free >= size * 1.1:
            return base
        reasons.append(f"{base} has {free >> 20} MiB free, the sandbox's files need {size >> 20} MiB")
    raise RootFsError(f"{'; '.join(reasons)}: set {ROOTFS_DIR_ENV} to a directory on a tmpfs with room")


def resident_copy(file: Path) -> Path:
    """A tmpfs copy of one more file a worker sees (a caller's preloaded module), named by its content."""
    data = file.read_bytes()
    store = rootfs_base(len(data)) / f"{PREFIX}{os.geteuid()}-files"
    with contextlib.suppress(FileExistsError):
        store.mkdir(mode=0o700)
    if not owned(store):
        raise RootFsError(f"{store} is not this uid's alone (owner or mode): remove it")
    copy = store / f"{hashlib.sha256(data).hexdigest()[:24]}{file.suffix}"
    if not copy.exists():
        descriptor, partial = tempfile.mkstemp(dir=store)
        with open(descriptor, "wb") as out:
            out.write(data)
        os.replace(partial, copy)
    return copy


def made_once(final: Path, fill: Callable[[Path], object]) -> Path:
    """`final`, filled by `fill(directory)` aside and renamed into place unless this uid made it before."""
    if not final.exists():
        building = Path(tempfile.mkdtemp(prefix=f".{PREFIX}", dir=final.parent))  # mode 0700
        try:
            fill(building / "tree")
            os.rename(building / "tree", final)
        except OSError as error:
            if not final.exists():  # else another process finished the same copy first
                raise RootFsError(f"copying the sandbox's files to {final.parent} failed: {error}") from error
        finally:
            shutil.rmtree(building, ignore_errors=True)
    if not owned(final):
        raise RootFsError(f"{final} is not this uid's alone (owner or mode): remove it")
    return final


def place_all(files: list[Path], mount_points: list[Path], root: Path) -> None:
    root.mkdir(mode=0o700)
    for path in files:
        place(path, root)
    for path in mount_points:  # bwrap cannot make a directory inside a read-only bind
        (root / path.relative_to("/")).mkdir(parents=True, exist_ok=True)


def package_sources(names: tuple[str, ...]) -> dict[str, Path]:
    """Where the caller's pure-Python packages (import names) live. A compiled one is refused."""
    sources = {}
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise RootFsError(f"package {name!r} is not installed beside the sandbox's caller")
        source = Path(spec.origin).parent if spec.submodule_search_locations else Path(spec.origin)
        if any(path.suffix in (".so", ".pyd") for path in walk(source)) or source.suffix not in ("", ".py"):
            raise RootFsError(
                f"package {name!r} is not pure Python: runs may import pure-Python packages only"
            )
        sources[name] = source
    return sources


def copy_packages(sources: dict[str, Path], copy: Path) -> None:
    copy.mkdir(mode=0o700)
    for source in sources.values():
        if source.is_dir():
            shutil.copytree(source, copy / source.name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, copy / source.name)


def copy_tree(source: Path, copy: Path) -> None:
    shutil.copytree(source, copy)
    copy.chmod(0o700)


def build_rootfs(python: str, package: Path, packages: tuple[str, ...] = ()) -> RootFs:
    """The tmpfs copies for `python`, the sandbox `package` and the caller's pure-Python `packages`: found if
    this uid made them before, else made. Apart: the interpreter's files change with the host, the rest with
    edits."""
    files, purelib = needed_files(python)
    sources = package_sources(packages)
    copied = [*files, *walk(package), *(path for source in sources.values() for path in walk(source))]
    base = rootfs_base(sum(path.stat().st_size for path in copied))
    prefix = base / f"{PREFIX}{os.geteuid()}"
    root = made_once(
        Path(f"{prefix}-{digest([*files, purelib])}"), functools.partial(place_all, files, [purelib])
    )
    package_copy = Path(f"{prefix}-package-{content_digest(package)}")
    rootfs = RootFs(root, made_once(package_copy, functools.partial(copy_tree, package)))
    if not sources:
        return rootfs
    site_copy = Path(f"{prefix}-site-{packages_digest(sources)}")
    site = made_once(site_copy, functools.partial(copy_packages, sources))
    return dataclasses.replace(rootfs, site=site, purelib=purelib)


def packages_digest(sources: dict[str, Path]) -> str:
    hashed = hashlib.sha256()
    for name, source in sorted(sources.items()):
        inner = content_digest(source) if source.is_dir() else hashlib.sha256(source.read_bytes()).hexdigest()
        hashed.update(f"{name}\0{inner}\n".encode())
    return hashed.hexdigest()[:24]
