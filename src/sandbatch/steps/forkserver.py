"""The step server: one per local run (or remote job), every step module imported once, a
fork per step.

Started by the Snakefile's `onstart` (local executor), or, in a remote job's Snakemake
(a Slurm job, which runs no hooks), when the Snakefile is read, as a child of Snakemake:
its CPU counts in the run's (or job's) process tree and it ends with that Snakemake:
stopped by `finish_run` (or at the job Snakemake's exit), or by the kernel's parent-death
signal when Snakemake itself is killed. When it stops it prints one line: the steps it
ran and the CPU of it all (imports, serving, the steps and what they ran). It listens on
an abstract Unix socket (no file to clean up; only this user's processes are served,
checked with SO_PEERCRED).

Nothing breaks at the host's limits: while memory is short no step starts, a fork the
process limit refuses is retried, and out of descriptors it stops accepting for a moment;
the clients wait in the backlog meanwhile.

Per request (see sandbatch.steps.entrypoint) it forks; the child takes the client's stdio
descriptors, working directory, environment and umask, tells the client its pid, runs the
step exactly as the script would, and sends the exit code. When the client goes away
without a word (its job was killed), the child gets SIGTERM, so the step's cleanup (delete
the sandbox it holds) runs as it would have in the job's own process.

The server imports but never starts anything that cannot cross a fork: no event loop, no
threads, no connections.

    python -m sandbatch.steps.forkserver NAME MODULE... [--then MODULE...]   # serve until SIGTERM
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import json
import os
import resource
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback
import uuid
from typing import Iterable

from . import RUN_STEPS, STEPS, run_here
from .entrypoint import ENV

DISABLE = "SANDBATCH_NO_STEP_SERVER"  # set (to anything) to run every step in its own job process
CLIENT_GRACE = 60.0  # seconds a step gets to clean up after its client vanished
SHUTDOWN_WAIT = 10.0  # seconds the server waits for running steps when told to stop
PR_SET_PDEATHSIG = 1
BACKOFF = 0.2  # seconds between tries when descriptors, processes or memory are short
FORK_WAIT = 600.0  # how long a step waits for a process or memory before its client runs it itself
MIN_AVAILABLE = 512 << 20  # bytes of available memory below which no step starts
THEN = "--then"  # among the modules: those before it are imported before any step is served


def preload_modules(cfg) -> list[str]:
    """What the steps of this run import, in the order a rollout's steps need them: every step,
    its provider, the trace SDK and the task loader (all the first step needs), THEN, its
    harness (and what it needs on this host: `Harness.host_modules`), model proxy and grader.
    The server imports what comes before THEN before it serves anyone, the rest between clients."""
    from ..grading import GRADERS
    from ..harness import HARNESSES, get_harness
    from ..sandbox import PROVIDERS
    from ..tasks import BENCHMARKS

    modules = [target.partition(":")[0] for target in STEPS.values()]
    modules.append(PROVIDERS[cfg.sandbox.provider].partition(":")[0])
    if cfg.traces.exporters:  # the SDK and its exporters (imports only; no thread starts)
        modules += ["sandbatch.trace.otel", *(f"opentelemetry.exporter.otlp.proto.{e[5:]}.trace_exporter"
                                              for e in cfg.traces.exporters if e != "file")]
    loader = BENCHMARKS[cfg.benchmark.kind]
    modules += [loader, THEN]
    modules.append(HARNESSES[cfg.harness.name].partition(":")[0])
    harness = get_harness(cfg.harness.name)  # mini-swe-agent on this host: mini and litellm
    modules += harness.host_modules(harness.options_of(cfg.harness.config))
    if cfg.model.proxy.enabled:
        modules.append("sandbatch.proxy")  # with aiohttp: ~0.25 CPU-s each harness step would pay
    family = getattr(importlib.import_module(loader), "FAMILY", None)
    if family in GRADERS:
        grader = GRADERS[family]
        modules += [grader.target.partition(":")[0], *grader.preload]
    modules += RUN_STEPS.values()  # the aggregate, last of all
    return list(dict.fromkeys(modules))


def executor_on_command_line(argv: list[str]) -> str | None:
    """The executor a Snakemake command line names (`--executor X`, `-e X`, `--executor=X`), or None."""
    for i, arg in enumerate(argv):
        if arg in ("--executor", "-e") and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--executor="):
            return arg.partition("=")[2]
    return None


class StepServer:
    """The Snakemake side: start the server as a child, point the jobs at it, stop it."""

    def __init__(self):
        self.proc: subprocess.Popen | None = None

    def start(self, cfg) -> None:
        if os.environ.get(DISABLE) or self.proc is not None:
            return
        name = f"sandbatch-steps-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self.proc = subprocess.Popen([sys.executable, "-m", __name__, name, *preload_modules(cfg)],
                                     stdin=subprocess.DEVNULL)
        # until it listens, steps would run by themselves: a moment's wait, once per run
        deadline = time.monotonic() + 10
        while self.proc.poll() is None and time.monotonic() < deadline:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                if probe.connect_ex("\0" + name) == 0:
                    break
            time.sleep(0.01)
        os.environ[ENV] = name  # the jobs Snakemake spawns from now on inherit it

    def stop(self) -> None:
        os.environ.pop(ENV, None)
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(SHUTDOWN_WAIT + 5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


# --- server --------------------------------------------------------------------------------

def serve(name: str, modules: Iterable[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the steps; the run stops us
    stopping = False

    def stop(_signum, _frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    _die_with_parent()
    # listen first: a step that starts meanwhile waits in the backlog for the imports it
    # would otherwise do itself. The modules come in the order a rollout's steps need them
    # (preload_modules), and the clients waiting are served between two imports: the first
    # steps (creating sandboxes) do not wait seconds for the harness's and the grader's
    # imports, which go on while those steps run
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + name)
    listener.listen(1024)
    modules = list(modules)
    cut = modules.index(THEN) if THEN in modules else len(modules)
    for entry in modules[:cut]:
        _preload(entry)
    pending = modules[cut + 1:]
    children: set[int] = set()
    served = 0
    while not stopping:
        _reap(children)
        try:
            ready, _, _ = select.select([listener], [], [], 0 if pending else 0.2)
        except InterruptedError:
            continue
        if not ready:
            if pending:
                _preload(pending.pop(0))
            continue
        try:
            conn, _ = listener.accept()
        except OSError:  # out of descriptors: the clients wait in the backlog meanwhile
            time.sleep(BACKOFF)
            continue
        _wait_for_memory()
        pid = _start(listener, conn, children)
        if pid:
            children.add(pid)
            served += 1
    listener.close()  # new clients run their steps themselves
    deadline = time.monotonic() + SHUTDOWN_WAIT
    while children and time.monotonic() < deadline:
        _reap(children)
        time.sleep(0.05)
    own, steps = (resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    print(f"sandbatch: step server: {served} steps; CPU {_cpu(own) + _cpu(steps):.2f} s "
          f"(imports and serving {_cpu(own):.2f}, steps {_cpu(steps):.2f})", file=sys.stderr, flush=True)
    return 0


def _preload(entry: str) -> None:
    """Import one module ("module", or "module:function" called once after the import)."""
    module, _, function = entry.partition(":")
    try:
        loaded = importlib.import_module(module)
        if function:
            getattr(loaded, function)()
    except Exception as exc:  # the step will report it properly when it runs
        print(f"sandbatch: step server: cannot preload {entry}: {exc}", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    gc.freeze()  # the children's collections leave the imported objects' pages shared


def _cpu(usage: resource.struct_rusage) -> float:
    return usage.ru_utime + usage.ru_stime


def _die_with_parent() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass
    if os.getppid() == 1:  # the parent died before the line above
        os.kill(os.getpid(), signal.SIGTERM)


def _reap(children: set[int]) -> None:
    for pid in list(children):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            children.discard(pid)


def _recv_request(conn: socket.socket) -> tuple[dict, list[int]]:
    """The client's stdin/stdout/stderr descriptors and its JSON request."""
    head, ancdata, _, _ = conn.recvmsg(5, socket.CMSG_SPACE(3 * 4))
    fds: list[int] = []
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds += struct.unpack(f"{len(data) // 4}i", data[: len(data) // 4 * 4])
    try:
        if len(head) != 5 or head[:1] != b"S" or len(fds) != 3:
            raise ValueError("malformed request")
        size = struct.unpack("!I", head[1:])[0]
        body = bytearray()
        while len(body) < size:
            chunk = conn.recv(min(1 << 20, size - len(body)))
            if not chunk:
                raise ValueError("truncated request")
            body += chunk
        return json.loads(body), fds
    except ValueError:
        for fd in fds:
            os.close(fd)
        raise


def _start(listener: socket.socket, conn: socket.socket, children: set[int]) -> int | None:
    """Fork the step of one request; the child never returns. A run-wide step (the aggregate,
    after every rollout) first waits for the steps still running: those reported done before
    their deletes, so that its reap of the run's sandboxes finds none of theirs in flight."""
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
        if uid != os.getuid():
            conn.close()
            return None
        conn.settimeout(5)  # clients send at once; a stuck one must not hold the others up long
        request, fds = _recv_request(conn)
        conn.settimeout(None)
    except (OSError, ValueError):
        conn.close()
        return None
    if request.get("step") in RUN_STEPS:
        deadline = time.monotonic() + CLIENT_GRACE
        while children and time.monotonic() < deadline:
            _reap(children)
            time.sleep(0.05)
    pid = _fork()
    if pid is None:  # no process to be had: the client runs the step itself
        for fd in fds:
            os.close(fd)
        conn.close()
        return None
    if pid == 0:
        listener.close()
        _child(conn, fds, request)  # never returns
    for fd in fds:
        os.close(fd)
    conn.close()
    return pid


def _fork() -> int | None:
    """os.fork(), retried while the process limit (EAGAIN) or memory (ENOMEM) is reached:
    the steps queue behind this one. None when it never succeeds."""
    deadline = time.monotonic() + FORK_WAIT
    while True:
        try:
            return os.fork()
        except OSError:
            if time.monotonic() > deadline:
                return None
            time.sleep(BACKOFF)


def _wait_for_memory() -> None:
    """Start no step while the host's available memory is below MIN_AVAILABLE (up to FORK_WAIT):
    a run asked for more rollouts than memory holds queues here instead of meeting the OOM killer."""
    deadline = time.monotonic() + FORK_WAIT
    while _available_memory() < MIN_AVAILABLE and time.monotonic() < deadline:
        time.sleep(BACKOFF)


def _available_memory() -> int:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return MIN_AVAILABLE  # unknown: do not hold steps back


def _child(conn: socket.socket, fds: list[int], request: dict) -> None:
    code = 1
    finished = threading.Event()

    def report(status: int) -> None:
        """The job's exit status, once: the client exits with it and Snakemake moves on."""
        if finished.is_set():
            return
        finished.set()
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass
        try:
            conn.sendall(f"exit {status}\n".encode())
        except OSError:
            pass

    from . import common

    # outputs written, only deletes left: the rollout's next job need not wait for them
    common.outputs_done = lambda: report(0)
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.umask(int(request["umask"]))
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ.pop(ENV, None)  # the step's own children never come back here
        sys.argv = [f"{request['step']}.py", *request["argv"]]
        conn.sendall(f"pid {os.getpid()}\n".encode())
        threading.Thread(target=_watch_client, args=(conn, finished), daemon=True).start()
        code = run_here(request["step"], request["argv"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KeyboardInterrupt:
        code = 130
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        report(code)
        os._exit(code & 0xFF if code >= 0 else 1)


def _watch_client(conn: socket.socket, finished: threading.Event) -> None:
    """The client never sends after its request: EOF means its job was killed."""
    try:
        while conn.recv(1):
            pass
    except OSError:
        pass
    if finished.is_set():
        return
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(CLIENT_GRACE)
    os._exit(143)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    return serve(args[0], args[1:])


if __name__ == "__main__":
    sys.exit(main())
