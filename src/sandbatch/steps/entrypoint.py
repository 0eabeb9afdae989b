"""Every workflow step script's entry point (workflow/scripts/*.py): hand the step to the
run's step server, or run it here.

A step process that imports asyncio, pydantic, the providers and the graders costs about
0.2 CPU-s before it does anything (1.3 s more for a SWE-bench grader), five times per
rollout. The step server (sandbatch.steps.forkserver) has all of that imported once; this
client passes it the job's stdin/stdout/stderr, arguments, working directory and
environment, forwards signals to the forked step and exits with its exit code. Without a
server (none started, another host, or it is going away) the step runs in this process,
exactly as before. Only the standard library's light modules are imported here.
"""

from __future__ import annotations

import array
import json
import os
import signal
import socket
import struct
import sys

ENV = "SANDBATCH_STEP_SERVER"  # the abstract socket name of this run's server (set by the Snakefile)
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def run_step(step: str) -> int:
    code = delegate(step)
    if code is None:
        from . import run_here

        code = run_here(step)
    return code


def _connect(name: str) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect("\0" + name)
    except OSError:  # no server on this host (yet, or any more)
        sock.close()
        return None
    return sock


def delegate(step: str) -> int | None:
    """The step's exit code from the server, or None when it did not take the step."""
    name = os.environ.get(ENV)
    if not name:
        return None
    sock = _connect(name)
    if sock is None:
        return None
    with sock:
        payload = json.dumps({"step": step, "argv": sys.argv[1:], "cwd": os.getcwd(),
                              "env": dict(os.environ), "umask": _umask()}).encode()
        try:
            sock.sendmsg([b"S" + struct.pack("!I", len(payload))],
                         [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
            sock.sendall(payload)
        except OSError:
            return None
        reader = sock.makefile("rb")
        first = reader.readline()
        if not first.startswith(b"pid "):
            return None  # the server refused (shutting down): nothing ran
        pid = int(first.split()[1])

        def forward(signum, _frame):
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

        for sig in FORWARDED:
            signal.signal(sig, forward)
        last = reader.readline()
        if last.startswith(b"exit "):
            return int(last.split()[1])
        print(f"sandbatch: the {step} step (pid {pid} of the step server) ended without an exit status",
              file=sys.stderr)
        return 1


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
