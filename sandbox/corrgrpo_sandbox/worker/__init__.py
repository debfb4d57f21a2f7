"""The worker interpreter that runs INSIDE the sandbox (stdlib only): `python -I .../worker/__main__.py ARGS`.

It reads requests from one pipe and writes replies to another. A request is a small header (limits, sizes)
followed by the body (the program, its files as JSON when it has any, stdin; each raw). The worker reads only
the header and forks the child FIRST. The child reads the body itself (stdin spliced into its memfd, never
through its memory), so no program, input or file ever enters the warm worker's memory, and the next child (a
copy of the worker) cannot find a previous run's data there. Output is read into fixed buffers that are zeroed
after each reply for the same reason.

The child becomes the run's program (own session, rlimits, cwd = a private tmp dir, fds 0-3 wired to a memfd
and pipes). The worker is a child subreaper: every process the program starts is its descendant, and CPU time
is that of the whole process tree (the worker's cgroup counter where it has one, else the rusage of every
process it reaps plus the live ones in /proc). The tree is killed when it reaches the CPU limit or the wall
limit, and when the child exits. A run ends only when every one of its processes is reaped. Then the writable
mounts are wiped (whatever permissions the run set), so nothing survives into the next run. A unix socket left
in the network namespace (the only family the seccomp filter allows, which refuses SysV IPC too) makes the run
an anomaly, and the worker and its namespaces are replaced. The pid and inode counters are moved after every
run to where any run would leave them (`residue`).

The program shares the sandbox with the worker, so the worker hides its pipes from it (moved to high fds,
closed in the child, and the worker is non-dumpable so /proc/<worker>/fd and ptrace are refused). If the
program kills the worker anyway, the parent sees a dead worker and reports an anomaly.

Modules: `server` (the loop, `main`), `child` (the forked child up to the program), `streams` (output
buffers), `process_tree` (a run's processes and CPU), `residue` (what a run may leave behind), `kernel`,
`seccomp`, and `protocol` (the wire format, shared with the parent). They import each other relatively: inside
the sandbox the package is `worker` (`__main__.py` puts the directory above it on `sys.path` just long enough
to import it, since `-I` puts no script directory there), in the parent `corrgrpo_sandbox.worker`.
"""
