"""`local` provider: a process sandbox in a scratch directory on this host.

It does NOT isolate anything: commands run as the current user with the host's
filesystem and network. It exists for the embedded default and fast tests. Each sandbox
is a directory `<root>/<id>/` with `work/` (the repository), `tmp/` (HOME and harness
state) and `meta.json` (labels, expiry) so that `list` and the reaper find it again.

The default root is outside the working directory (default_root): a task's test runner
looks for its configuration in the directories above the workdir (pytest takes the first
pytest.ini / pyproject.toml / tox.ini / setup.cfg it finds there as rootdir and config),
so no project, user or run configuration may lie above a sandbox.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Mapping

from pydantic import Field

from ..core.failures import FailureClass
from ..core.util import read_json, write_json
from .base import (CA_ENV, STOP_ROUNDS, ExecResult, Provider, ProviderOptions, Sandbox, SandboxError, SandboxGone,
                   SandboxInfo, SandboxSpec, State)


# what a local sandbox inherits from the step's environment (see LocalSandbox._env): the
# locale, and the host's CA bundle settings (no secret; behind a TLS-intercepting proxy
# pip, uv and npm in the sandbox reach nothing without them)
PASSED_ENV = ("LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM", "USER", "LOGNAME", "SSL_CERT_DIR", *CA_ENV)
DELETING = "deleting"  # marks a sandbox whose delete has begun: gone for commands, listed for the reaper
DRAIN_S = 2.0  # after a timeout, how long output still in the pipes is read


def host_path() -> list[str]:
    """The host's PATH without the runner's virtualenv (an agent's `pip install` must not land there)."""
    venv = os.path.realpath(sys.prefix)
    return [d for d in os.environ.get("PATH", "").split(os.pathsep)
            if d and not (sys.prefix != sys.base_prefix and os.path.realpath(d).startswith(venv + os.sep))]


def make_python(target: Path) -> None:
    """A virtualenv of the sandbox's own at `target` that also sees the runner's installed
    packages (read-only, through a .pth file): the smoke tasks' `python3 -m pytest` works, and
    `pip install` lands in the sandbox. Written by hand: `python -m venv` costs ~1 s of CPU."""
    import site
    import sysconfig

    base = Path(getattr(sys, "_base_executable", sys.executable))
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    (target / "bin").mkdir(parents=True)
    for name in ("python", "python3", f"python{version}"):
        (target / "bin" / name).symlink_to(base)
    (target / "pyvenv.cfg").write_text(f"home = {base.parent}\ninclude-system-site-packages = false\n"
                                       f"version = {sys.version.split()[0]}\n")
    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(target), "platbase": str(target)}))
    purelib.mkdir(parents=True)
    (purelib / "_sandbatch_runner.pth").write_text("".join(p + "\n" for p in site.getsitepackages()))


def default_root(cwd: str | os.PathLike | None = None) -> Path:
    """<system temp>/sandbatch-<uid>/<hash of the working directory>/sandboxes: one root per working
    directory (each run's steps, `stop` and the reaper find the same), none inside a project."""
    where = os.path.realpath(cwd or os.getcwd())
    tag = hashlib.sha256(where.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"sandbatch-{os.getuid()}" / tag / "sandboxes"


class LocalOptions(ProviderOptions):
    """Options of the local (process, not isolated) provider."""

    root: str | None = Field(None, description=(
        'Scratch directory holding one sub-directory per sandbox. null = a directory per working '
        'directory under the system temp directory (<tmp>/sandbatch-<uid>/<hash>/sandboxes), where no '
        "project's test-runner configuration lies above a sandbox's workdir. A root inside a project "
        "makes pytest take that project's configuration for the task's tests: grading then fails with "
        'grading_rootdir.'))


class LocalSandbox(Sandbox):
    # the tests cannot run as a user of their own here: the interpreters and the sandbox's directories
    # are the host's (often under a home only its owner may enter), shared by every grade running at once
    separate_users = False

    def __init__(self, provider: "LocalProvider", sandbox_id: str, spec: SandboxSpec):
        self.provider = provider
        self.id = sandbox_id
        self.spec = spec
        self.root = provider.root / sandbox_id
        self.workdir = str(self.root / "work")
        self.tmpdir = str(self.root / "tmp")

    @property
    def alive(self) -> bool:
        return (self.root / "meta.json").is_file() and not (self.root / DELETING).exists()

    def _check(self) -> None:
        if not self.alive:
            raise SandboxGone(f"local sandbox {self.id} no longer exists ({self.root})")

    def _env(self, extra: dict[str, str] | None) -> dict[str, str]:
        """A minimal environment, nothing of the step's own (model keys, SANDBATCH_* settings,
        the runner's virtualenv): PATH = the sandbox's Python, then the host's PATH without the
        runner's venv; HOME, TMPDIR and XDG directories under the sandbox; the locale, terminal
        and CA bundle variables; then the spec's and the command's own variables."""
        env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
        env.setdefault("LANG", "C.UTF-8")
        env["PATH"] = os.pathsep.join([str(self.root / "python" / "bin"), *host_path()])
        tmp = Path(self.tmpdir)
        env.update(HOME=self.tmpdir, TMPDIR=self.tmpdir, XDG_CONFIG_HOME=str(tmp / ".config"),
                   XDG_CACHE_HOME=str(tmp / ".cache"), XDG_DATA_HOME=str(tmp / ".local" / "share"),
                   XDG_STATE_HOME=str(tmp / ".local" / "state"))
        env.update(self.spec.env)
        env.update(extra or {})
        return env

    async def exec(self, command, *, timeout, cwd=None, env=None, stdin=None, lost="fail") -> ExecResult:
        self._check()  # `lost`: its pipes lose nothing
        argv = ["bash", "-c", command] if isinstance(command, str) else list(command)
        start = time.monotonic()
        # stdout and stderr are pipes of our own, read as they fill: on a timeout what was
        # printed so far is the result, and the pipes can be closed even while a process that
        # left the group holds them (asyncio's own pipes make wait() wait for every holder)
        out, err = await _OutputPipe.open(), await _OutputPipe.open()
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                cwd=cwd or self.workdir,
                env=self._env(env),
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=out.write_fd,
                stderr=err.write_fd,
                start_new_session=True,  # so a timeout kills the whole process group
            )
        except BaseException:
            out.close()
            err.close()
            raise
        finally:
            out.close_write()
            err.close_write()
        running = _note_group(self.root, proc.pid)
        tasks = [asyncio.ensure_future(t) for t in (_feed(proc.stdin, stdin), out.done, err.done, proc.wait())]
        try:
            # asyncio.wait, not wait_for: nothing is cancelled when the time is up
            _, pending = await asyncio.wait(tasks, timeout=timeout)
            timed_out = bool(pending)
            if timed_out:
                _killpg(proc.pid)
                # the pipes close with the process group; take what a process that left the
                # group prints within a moment, then stop reading
                await asyncio.wait(tasks, timeout=DRAIN_S)
            else:
                for task in tasks:
                    task.result()  # a reader's own failure is raised, not swallowed
        except asyncio.CancelledError:
            _killpg(proc.pid)
            raise
        finally:
            for task in tasks:
                task.cancel()
            out.close()
            err.close()
            running.unlink(missing_ok=True)
        if proc.returncode != 0:
            self._check()  # a command that failed because its sandbox was deleted under it: infrastructure
        return ExecResult(
            exit_code=-1 if timed_out else proc.returncode,
            stdout=out.data.decode("utf-8", "replace"),
            stderr=err.data.decode("utf-8", "replace"),
            timed_out=timed_out,
            duration_s=time.monotonic() - start,
        )

    async def upload(self, path: str, data: bytes, mode: int = 0o644) -> None:
        await self._write({path: (data, mode)})

    async def upload_files(self, files: Mapping[str, tuple[bytes, int]]) -> None:
        await self._write(files)

    async def _write(self, files: Mapping[str, tuple[bytes, int]]) -> None:
        self._check()
        for path, (data, mode) in files.items():
            p = Path(path)
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
            p.chmod(mode)

    async def download(self, path: str) -> bytes:
        self._check()
        try:
            return Path(path).read_bytes()
        except FileNotFoundError:
            raise SandboxError(f"{path}: no such file in sandbox {self.id}", FailureClass.SANDBOX_FILE) from None

    async def status(self) -> State:
        return "running" if self.alive else "gone"

    # Image paths a benchmark needs per sandbox (Terminal-Bench's verifier reads /tests and
    # writes /logs/verifier). On this host they would be shared by every sandbox and need
    # root, so each sandbox gets its own copy under <root>/<id>/fs/.
    MAPPED_ROOTS = ("/logs", "/tests", "/solution")

    async def stop_processes(self, shell: str = "") -> int:
        """The sandbox's processes are host processes: those whose HOME is the sandbox's (every exec
        sets it); each group is frozen, then killed."""
        killed, left = _kill_homed(self.tmpdir)
        if left:
            raise SandboxError(f"{left} processes of the sandbox still ran after {STOP_ROUNDS} rounds of SIGSTOP "
                               "and SIGKILL", FailureClass.SANDBOX_EXEC)
        return killed

    def map_path(self, path: str) -> str:
        wd = self.spec.workdir.rstrip("/")
        if wd and (path == wd or path.startswith(wd + "/")):
            return self.workdir + path[len(wd):]
        for prefix in self.MAPPED_ROOTS:
            if path == prefix or path.startswith(prefix + "/"):
                return str(self.root / "fs") + path
        return path


async def _feed(pipe: asyncio.StreamWriter | None, data: bytes | None) -> None:
    """Write a command's stdin and close it; a command that exits without reading it is fine."""
    if pipe is None:
        return
    try:
        pipe.write(data or b"")
        await pipe.drain()
        pipe.close()
    except (BrokenPipeError, ConnectionResetError):
        pass


class _OutputPipe(asyncio.Protocol):
    """A pipe a command writes to (`write_fd`) and this process reads into `data` as it fills."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.done = asyncio.get_running_loop().create_future()  # set at end of file
        self.write_fd = -1
        self._transport: asyncio.ReadTransport | None = None

    @classmethod
    async def open(cls) -> "_OutputPipe":
        read_fd, write_fd = os.pipe()
        pipe = cls()
        pipe.write_fd = write_fd
        pipe._transport, _ = await asyncio.get_running_loop().connect_read_pipe(
            lambda: pipe, os.fdopen(read_fd, "rb", buffering=0))
        return pipe

    def data_received(self, data: bytes) -> None:
        self.data += data

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)

    def close_write(self) -> None:
        """Close this process's copy of the write end (the command has its own)."""
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1

    def close(self) -> None:
        self.close_write()
        if self._transport is not None:
            self._transport.close()


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]


def _environ(pid: int) -> dict[bytes, bytes]:
    try:
        data = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(kv.partition(b"=")[::2] for kv in data.split(b"\0") if kv)


def _signal(pid: int, sig: int) -> int:
    try:
        os.kill(pid, sig)
        return 1
    except OSError:
        return 0


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


GROUPS = "groups"  # <root>/<id>/groups/<pid>: the process group of each command running, and its start


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat), None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def _note_group(root: Path, pid: int) -> Path:
    """Record a command's process group while it runs: a step SIGKILLed meanwhile cannot stop
    it, so the sandbox's delete (the rerun's, or the reaper's) does."""
    path = root / GROUPS / str(pid)
    try:
        path.parent.mkdir(exist_ok=True)
        path.write_text(_start_time(pid) or "")
    except OSError:
        pass
    return path


def _kill_homed(home: str) -> tuple[int, int]:
    """Kill the processes whose HOME is `home` (every exec of the sandbox sets it), each frozen
    first: also those that left the command's process group (setsid, a daemon). Rounds go on
    until one finds none (a child forked while its parent was being found is in the next);
    (how many were killed, how many still ran after the last round)."""
    killed: set[int] = set()
    mine: list[int] = []
    for _ in range(STOP_ROUNDS):
        # a zombie has no environment; one SIGKILLed runs no more code
        mine = [pid for pid in _pids() if pid not in killed and _environ(pid).get(b"HOME") == home.encode()]
        if not mine:
            break
        for pid in mine:
            _signal(pid, signal.SIGSTOP)
        killed |= {pid for pid in mine if _signal(pid, signal.SIGKILL)}
    return len(killed), len(mine)


def _kill_groups(root: Path) -> None:
    for path in (root / GROUPS).glob("*") if (root / GROUPS).is_dir() else []:
        try:
            pid, started = int(path.name), path.read_text()
        except (OSError, ValueError):
            continue
        now = _start_time(pid)
        # a leader that is gone leaves its group id unused by any new process while members
        # live; a live pid that started at another time is another process: never touched
        if now is None or now == started:
            _killpg(pid)


class LocalProvider(Provider):
    name = "local"
    options_model = LocalOptions
    proxy_hosts = ("127.0.0.1", "127.0.0.1")  # its sandboxes are processes of this host
    needs_image = False
    plumbing = ("root",)
    # its commands are processes of this host's network namespace: nothing can be restricted
    # without privileges the runner does not have; rollouts record it (NetworkRecord.enforced)
    isolates_network = False

    def __init__(self, options=None):
        super().__init__(options)
        root = self.options.get("root")
        self.root = Path(root).absolute() if root else default_root()

    async def create(self, spec: SandboxSpec) -> LocalSandbox:
        sandbox_id = f"sb-{uuid.uuid4().hex[:12]}"
        sb = LocalSandbox(self, sandbox_id, spec)
        try:
            # labels first: a create killed midway leaves a sandbox the reaper finds
            sb.root.mkdir(parents=True)
            expires = datetime.now(timezone.utc) + timedelta(seconds=spec.ttl_seconds)
            write_json(sb.root / "meta.json", {"labels": spec.labels, "expires_at": expires.isoformat()})
            Path(sb.workdir).mkdir()
            Path(sb.tmpdir).mkdir()
            make_python(sb.root / "python")
        except OSError as exc:
            shutil.rmtree(sb.root, ignore_errors=True)
            raise SandboxError(f"cannot create local sandbox under {self.root}: {exc}",
                               FailureClass.SANDBOX_CREATE) from exc
        return sb

    async def connect(self, sandbox_id: str, spec: SandboxSpec) -> LocalSandbox:
        sb = LocalSandbox(self, sandbox_id, spec)
        sb._check()
        return sb

    async def list(self, labels: dict[str, str]) -> list[SandboxInfo]:
        out = []
        if not self.root.is_dir():
            return out
        for path in self.root.glob("sb-*"):
            # an empty directory is what a delete killed in its last step (meta.json gone, the
            # directory not yet) leaves: no sandbox, no labels; rmdir fails on anything else
            try:
                path.rmdir()
            except OSError:
                pass
        for meta_path in sorted(self.root.glob("*/meta.json")):
            try:
                meta = read_json(meta_path)
            except (OSError, ValueError):
                continue
            have = meta.get("labels", {})
            if all(have.get(k) == v for k, v in labels.items()):
                out.append(SandboxInfo(id=meta_path.parent.name, state="running", labels=have,
                                       expires_at=meta.get("expires_at")))
        return out

    async def delete(self, sandbox_id: str) -> bool:
        path = self.root / sandbox_id
        if not path.exists():
            return False
        await asyncio.to_thread(_remove, path)
        return True


def _remove(path: Path) -> None:
    """Mark the sandbox gone, then delete it with its meta.json last: a delete killed midway
    leaves a sandbox that `list` still finds, so the reaper finishes it."""
    (path / DELETING).touch()
    _kill_groups(path)  # commands of a step that was killed while they ran
    _kill_homed(str(path / "tmp"))  # and what they started outside their groups (LocalSandbox.tmpdir)
    for child in path.iterdir():
        if child.name not in ("meta.json", DELETING):
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)
    (path / "meta.json").unlink(missing_ok=True)
    shutil.rmtree(path, ignore_errors=True)
