"""Where a run's stdout, stderr and channel (fd 3) go: pipes sized to the output cap, read into fixed buffers
that no child inherits and that are zeroed after every reply (the next child, a copy of the worker, finds
nothing there)."""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os

from .kernel import READ_CHUNK
from .protocol import PIPE_DEFAULT


def output_pipe(size: int) -> tuple[int, int]:
    """A pipe that holds `size` bytes (the run's output cap, within the parent's
    `worker_handle.output_pipe_bytes`): a program that writes a large output at once then never waits for the
    worker, which reads it when it exits. With the default 64 KiB a 500 KB answer took twice its CPU time in
    wall time (see `server.supervise`)."""
    read_end, write_end = os.pipe()
    if size > PIPE_DEFAULT:  # never smaller: a flood past a small cap drains as fast as before
        with contextlib.suppress(OSError):  # refused by the kernel: the default size, only slower
            fcntl.fcntl(read_end, fcntl.F_SETPIPE_SZ, size)
    return read_end, write_end


def unforked_buffer(size: int) -> mmap.mmap:
    """Zeroed memory that no child inherits (MADV_DONTFORK): a fork copies no page table entry of it and the
    worker's writes to it never fault on pages shared with a running child (3 MiB of output buffers were a
    third of the worker's memory, and so of what every fork copied)."""
    memory = mmap.mmap(-1, size)
    memory.madvise(mmap.MADV_DONTFORK)
    return memory


class Streams:
    """Fixed buffers the child's stdout, stderr and channel are read into, each capped, zeroed after every
    reply."""

    def __init__(self) -> None:
        self.cap = 0
        self.memory = unforked_buffer(READ_CHUNK)
        self.used = [0, 0, 0]
        self.truncated = False

    def reset(self, cap: int) -> None:
        if cap != self.cap:
            # the last chunk swallows what lies beyond a cap
            self.memory = unforked_buffer(3 * cap + READ_CHUNK)
            self.cap = cap
        self.used = [0, 0, 0]
        self.truncated = False

    def read(self, fd: int, index: int) -> int:
        """One read of stream `index` from `fd`: bytes read, 0 at its end, -1 when nothing is there yet."""
        used = self.used[index]
        view = memoryview(self.memory)
        start, end = (
            (index * self.cap + used, (index + 1) * self.cap) if used < self.cap else (3 * self.cap, None)
        )
        target = view[start:end]
        try:
            count = os.readv(fd, [target])
        except BlockingIOError:
            return -1
        if used < self.cap:
            self.used[index] += count
        else:
            self.truncated |= count > 0
        return count

    def views(self) -> list[memoryview]:
        view = memoryview(self.memory)
        return [view[index * self.cap : index * self.cap + self.used[index]] for index in range(3)]

    def zero(self) -> None:
        for index, used in enumerate(self.used):
            self.memory[index * self.cap : index * self.cap + used] = bytes(used)
        if self.truncated:
            self.memory[3 * self.cap :] = bytes(READ_CHUNK)
