"""The two value types of one sandboxed execution: what it may use (Limits), and what it did (ExecResult)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .worker.child import cpu_cap_s


@dataclass(frozen=True)
class Limits:
    """Resource limits of one execution (applied in the child as rlimits, plus a wall-clock timeout)."""

    cpu_s: float = 5.0  # RLIMIT_CPU (rounded up to whole seconds)
    wall_s: float = 10.0  # wall-clock timeout. The child's process group and every straggler are killed
    memory_mb: int = 1024  # RLIMIT_AS
    file_mb: int = 16  # RLIMIT_FSIZE
    open_files: int = 64  # RLIMIT_NOFILE
    # RLIMIT_NPROC, and the worker's pids cgroup where there is one (uid 0 too, see README)
    processes: int = 16
    output_bytes: int = 65536  # cap for each of stdout / stderr / channel

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not value > 0:
                raise ValueError(f"Limits.{name} must be positive, got {value!r}")

    @property
    def cpu_cap_s(self) -> int:
        """The most CPU a run may spend, all its processes together: `cpu_s` rounded up, plus one second."""
        return cpu_cap_s(self.cpu_s)


@dataclass
class ExecResult:
    """Outcome of one execution, measured outside the program's process."""

    exit_code: int | None  # None when killed by a signal (or on an anomaly)
    signal: int | None
    stdout: bytes
    stderr: bytes
    channel: bytes  # what the child wrote to fd 3 (a pipe only the parent reads), capped
    truncated: bool  # any stream hit Limits.output_bytes
    timed_out: bool  # the wall-clock timeout fired or the CPU limit killed the child
    # user+sys CPU of the run's whole process tree, from the kernel (cgroup cpuacct, else rusage + /proc)
    cpu_s: float
    # monotonic wall time from the end of the child's set-up until every process of the run is gone
    wall_s: float
    peak_rss_kb: int
    isolation: str  # "bwrap", "docker" or "unsafe-none"
    anomaly: str | None  # worker died / protocol broke: the execution is NOT trustworthy


class RunCancelled(Exception):
    """The caller cancelled the run (`Sandbox.cancellable`): its worker, and every process of the run, was
    killed."""
