"""Small helpers over the kernel's interfaces that the worker uses: prctl, and /proc or cgroup files kept
open."""

from __future__ import annotations

import ctypes
import os

LIBC = ctypes.CDLL(None, use_errno=True)
PAGE = 4096
READ_CHUNK = 65536


def prctl(option: int, value: int) -> None:
    if LIBC.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


class KernelFile:
    """A /proc or cgroup file the worker reads after every run, kept open and read with pread from offset 0:
    one system call per read, where `open().read()` made eight (the kernel writes the text anew at each read).
    The fd is the worker's alone: the child closes every fd above 3 before the program runs."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    @classmethod
    def open(cls, path: str) -> KernelFile:
        return cls(os.open(path, os.O_RDONLY | os.O_CLOEXEC))

    def read(self) -> bytes:
        """The whole text (a file of many records, such as /proc/net/unix, may take several reads)."""
        chunks, offset = [], 0
        while chunk := os.pread(self.fd, READ_CHUNK, offset):
            chunks.append(chunk)
            offset += len(chunk)
        return b"".join(chunks)

    def read_small(self) -> bytes:
        """A file of one short record (a counter, a limit table): the kernel writes it in one piece, one
        read."""
        return os.pread(self.fd, PAGE, 0)


def namespace_file(name: str) -> KernelFile:
    """A file of /proc/<pid> that shows the namespaces, not the process, opened through a short-lived child:
    the worker's own entry (/proc/self, /proc/net) is hidden under bwrap. The open file keeps reading the
    namespace."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(write_end)
        os.read(read_end, 1)  # until the worker has opened the file
        os._exit(0)
    try:
        return KernelFile.open(f"/proc/{pid}/{name}")
    finally:
        os.close(write_end)
        os.close(read_end)
        os.waitpid(pid, 0)
