"""The code service's app: its sandbox (refused without isolation), readiness probes and the score route."""

from __future__ import annotations

import atexit
import logging
from dataclasses import replace

from fastapi import FastAPI

from corrgrpo_code.harness import CHILD_FILE, RUN_PACKAGES
from corrgrpo_common import StartRefused, add_score_route, make_store
from corrgrpo_proto.code import CodeScoreRequest
from corrgrpo_sandbox import ExecResult, IsolationUnavailable, Sandbox

from .declaration import SERVICE
from .problems import load_problems
from .scorer import CodeScorer
from .settings import CodeSettings

log = logging.getLogger("corrgrpo.code")
# CPU a run spends where no wait of its own collects it: a child the kernel reaps (SIGCHLD ignored, where the
# sandbox allows it) and a grandchild orphaned to the worker. Uncounted, a reference copy earns efficiency.
HIDDEN_CPU_S = 0.05
HIDDEN_CPU = f"""
import os, signal, time
try:
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
except OSError:
    pass
for orphan in (False, True):
    read, write = os.pipe()
    if os.fork() == 0:
        if not orphan or os.fork() == 0:
            end = time.process_time() + {HIDDEN_CPU_S}
            while time.process_time() < end:
                pass
        os._exit(0)
    os.close(write)
    os.read(read, 1)
"""


# Processes a run holds at once, past its limit (`processes`) if nothing stops it. It ends them itself, so
# that no leftover makes the run an anomaly.
MANY_PROCESSES = """
import os, signal, time
started = []
for _ in range({attempts}):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    started.append(pid)
for pid in started:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
print(len(started))
"""


def probe(sandbox: Sandbox, source: str) -> ExecResult:
    """A start-up probe's run. A worker that broke tells nothing of the shape: once more, on a fresh one."""
    limits = replace(sandbox.limits, cpu_s=2, wall_s=10)
    result = sandbox.run(source, limits=limits)
    return sandbox.run(source, limits=limits) if result.anomaly else result


def failed(result: ExecResult) -> str | None:
    if result.anomaly or result.exit_code != 0:
        return f"the probe run failed: {result.anomaly or result.stderr[-300:].decode(errors='replace')}"
    return None


def uncounted_cpu(sandbox: Sandbox) -> str | None:
    """Why this shape's sandbox does not count all of a run's CPU, or None when it does (a run proves it)."""
    result = probe(sandbox, HIDDEN_CPU)
    if why := failed(result):
        return why
    if result.cpu_s < 1.6 * HIDDEN_CPU_S:  # two processes spent HIDDEN_CPU_S each
        return f"{result.cpu_s:.3f} s of a run's {2 * HIDDEN_CPU_S} s in reaped processes counted"
    return None


def process_bound(sandbox: Sandbox) -> str:
    """What bounds a run's processes in this shape, as a run finds it (as uid 0 without a pids cgroup, only
    its CPU and wall limits do)."""
    limit = sandbox.limits.processes
    result = probe(sandbox, MANY_PROCESSES.format(attempts=limit + 8))
    if why := failed(result):
        return why
    started = int(result.stdout)
    if started >= limit + 8:
        return f"unbounded: a run held {started} processes (limit {limit}); only CPU and wall limits end them"
    return f"at most {limit} a run"


def build(settings: CodeSettings) -> FastAPI:
    try:
        sandbox = Sandbox(
            mode=settings.code_sandbox_mode,
            workers=settings.code_workers,
            limits=settings.limits(),
            isolation=settings.code_isolation,
            preload=[CHILD_FILE],
            packages=RUN_PACKAGES,
        )
    except IsolationUnavailable as error:
        raise StartRefused(
            f"no isolation to run untrusted code: {error} "
            "(for the code service: CORRGRPO_CODE_ISOLATION=unsafe-none)"
        ) from error
    (log.warning if sandbox.isolation == "unsafe-none" else log.info)(
        "code service: sandbox isolation %s", sandbox.isolation
    )
    uncounted = uncounted_cpu(sandbox)
    if uncounted and sandbox.isolation != "unsafe-none":  # efficiency and time limits would pay hidden work
        sandbox.close()
        raise StartRefused(f"not all of a run's CPU is counted here: {uncounted}")
    processes = process_bound(sandbox)
    atexit.register(sandbox.close)
    store = make_store(settings)
    scorer = CodeScorer(sandbox, store, load_problems(settings.code_datasets), settings)

    async def sandbox_isolation() -> str | None:
        """Ready only with isolation: `unsafe-none` runs (opted in by name) but is never reported ready."""
        if sandbox.isolation == "unsafe-none":
            raise RuntimeError("isolation unsafe-none: untrusted code runs unsandboxed")
        return sandbox.isolation

    async def cpu_counted() -> str:
        if uncounted:
            raise RuntimeError(uncounted)
        return "every process of a run counted"

    async def processes_bounded() -> str:
        return processes

    async def page_cache() -> str:  # said, not refused: docker isolation cannot close it (sandbox/README.md)
        if sandbox.resident_files:
            return "every file a run sees is a tmpfs copy: no bits through page residency"
        return f"open under {sandbox.isolation}: a run can pass bits to later runs through page residency"

    readiness = {
        "sandbox": sandbox_isolation,
        "cpu": cpu_counted,
        "processes": processes_bounded,
        "page_cache": page_cache,
    }
    app = SERVICE.create_app(settings, readiness=readiness, store=store, field_limits=settings.field_limits())
    app.state.scorer = scorer
    add_score_route(app, CodeScoreRequest, scorer.score)
    return app
