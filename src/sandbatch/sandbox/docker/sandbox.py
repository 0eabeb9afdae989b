"""A container as a Sandbox: commands through exec, files through the engine's archives."""

from __future__ import annotations

import asyncio
import io
import tarfile
import time
import uuid
from typing import Mapping, Sequence

from ...core.failures import FailureClass
from ...core.util import unawaited
from ..base import KILLED_EXIT_CODES, ExecResult, Lost, Sandbox, SandboxError, SandboxGone, SandboxSpec, State
from . import network
from .engine import EngineOwner, NotFound
from .state import GONE, ContainerState, SandboxOOM, container_state, sandbox_path, tail

TMPDIR = "/tmp/sandbatch"
KILL_SETTLE_CHECKS = 10  # x 0.2 s: how long a 137/143 waits for the engine to report a killed container
# the variable that marks every process of one exec, so a timeout can kill all of them
EXEC_MARK = "SANDBATCH_EXEC"
# what the engine answers, with exit 126, when the runtime could not start an exec's process
RUNTIME_START_FAILED = "OCI runtime exec failed"
RUNTIME_START_ATTEMPTS = 5
OOM_KILLS = ("cat /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null"
             " | awk '$1 == \"oom_kill\" {n += $2} END {print n + 0}'")


def archive(files: dict[str, tuple[bytes, int]], dirs: Sequence[str] = ()) -> bytes:
    """A tar of absolute paths -> (data, mode), to be extracted at "/", and of directories
    `dirs`: no entries for the parents, so the engine creates missing ones and leaves
    existing ones alone."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in dirs:
            info = tarfile.TarInfo(sandbox_path(path).lstrip("/"))
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, int(time.time())
            tar.addfile(info)
        for path, (data, mode) in files.items():
            info = tarfile.TarInfo(sandbox_path(path).lstrip("/"))
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class DockerSandbox(Sandbox):
    def __init__(self, provider: EngineOwner, name: str, spec: SandboxSpec):
        self.provider = provider
        self.engine = provider.engine
        self.id = name
        self.spec = spec
        self.workdir = sandbox_path(spec.workdir)
        self.tmpdir = TMPDIR

    async def state(self) -> ContainerState:
        """The engine's view, including whether the kernel OOM-killed the container."""
        data = await self.provider.inspect(self.id)
        if data is None:
            return ContainerState(state="gone", status="missing")
        return container_state(data)

    async def status(self) -> State:
        return (await self.state()).state

    async def restrict_network(self, proxy: tuple[str, int] | None) -> str | None:
        """A network of its own with the model proxy's gate as its one way out (network.py)."""
        try:
            return await network.restrict(self.provider, self, proxy[1] if proxy else None)
        except (NotFound, SandboxError) as exc:
            await self._raise_gone("cannot have its network restricted", str(exc))
            if isinstance(exc, SandboxError) and exc.failure_class == FailureClass.SANDBOX_NETWORK:
                raise
            raise SandboxError(f"docker sandbox {self.id}: cannot restrict its network: {tail(str(exc))}",
                               FailureClass.SANDBOX_NETWORK) from None

    async def _raise_gone(self, context: str, detail: bytes | bytearray | str = b"") -> None:
        """Raise SandboxGone (or SandboxOOM) if the container no longer runs."""
        st = await self.state()
        if st.state == "running":
            return
        message = f"docker sandbox {self.id} {context}: container is {st.describe()}"
        if st.oom_killed:
            raise SandboxOOM(message + " (raise resources.memory)")
        raise SandboxGone(message + (f" ({tail(detail)})" if detail else ""))

    async def exec(
        self,
        command: str | Sequence[str],
        *,
        timeout: float,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        stdin: bytes | None = None,
        lost: Lost = "fail",  # the engine's attached stream ends with the process: nothing to lose
    ) -> ExecResult:
        for _ in range(RUNTIME_START_ATTEMPTS):
            res = await self._exec_once(command, timeout=timeout, cwd=cwd, env=env, stdin=stdin)
            # the runtime could not start the process, so nothing ran: start it again. A container
            # full at its pids limit does this now and then (runc's init clones inside its cgroup).
            if not (res.exit_code == 126 and res.stdout.startswith(RUNTIME_START_FAILED)):
                break
        return res

    async def _exec_once(
        self,
        command: str | Sequence[str],
        *,
        timeout: float,
        cwd: str | None,
        env: dict[str, str] | None,
        stdin: bytes | None,
    ) -> ExecResult:
        # `bash -c` as OpenSandbox's execd and the local provider run it: a login shell would
        # read /etc/profile, which resets the PATH the image's ENV set (conda, ~/.local/bin)
        argv = ["bash", "-c", command] if isinstance(command, str) else list(command)
        mark = uuid.uuid4().hex
        start = time.monotonic()
        try:
            stream = await self.engine.exec_start(self.id, argv, cwd=cwd or self.workdir,
                                                  env={**(env or {}), EXEC_MARK: mark}, stdin=stdin is not None)
        except (NotFound, SandboxError) as exc:
            if isinstance(exc, NotFound) or GONE.search(str(exc)):
                await self._raise_gone("cannot run a command", str(exc))
            raise
        out, err = bytearray(), bytearray()
        # shielded so that a timeout keeps what the command printed before it was killed
        io_done = unawaited(asyncio.ensure_future(asyncio.to_thread(stream.communicate, stdin, out, err)))
        timed_out = False
        try:
            try:
                await asyncio.wait_for(asyncio.shield(io_done), timeout=timeout)
            except TimeoutError:
                timed_out = True
                await self._kill_marked(mark)
                try:
                    await asyncio.wait_for(asyncio.shield(io_done), timeout=5.0)
                except TimeoutError:
                    stream.cut()
                    await io_done
            except asyncio.CancelledError:
                await asyncio.shield(self._kill_marked(mark))
                stream.cut()
                raise
            code = -1 if timed_out else await stream.exit_code()
        finally:
            stream.close()
        stderr = err.decode("utf-8", "replace")
        if not timed_out and (code is None or code in KILLED_EXIT_CODES):
            # killed, or the engine lost the command: whether the sandbox is the cause is asked
            # of the engine, not read from what the command printed. The engine records a killed
            # container's exit a moment after the exec ends: ask again for a little while before
            # taking the status for the command's own
            for _ in range(KILL_SETTLE_CHECKS):
                await self._raise_gone(f"command ended with exit {code}", err)
                await asyncio.sleep(0.2)
                if code is None and (code := await stream.exit_code()) is not None:
                    break
            code = -1 if code is None else code
        kills = await self._oom_kills() if not timed_out and code == 137 else 0
        if kills is None:  # the container stopped since the command's end: that is the answer
            await self._raise_gone(f"command ended with exit {code}", err)
        if kills:
            # 137 = SIGKILL; say so when the kernel's OOM killer sent it (the container lives on)
            if stderr and not stderr.endswith("\n"):
                stderr += "\n"
            stderr += ("[sandbatch] SIGKILL, and the kernel OOM killer has struck in this sandbox: "
                       "it hit its memory limit\n")
        return ExecResult(
            exit_code=-1 if timed_out else code,
            stdout=out.decode("utf-8", "replace"),
            stderr=stderr,
            timed_out=timed_out,
            duration_s=time.monotonic() - start,
        )

    async def _quick(self, script: str) -> tuple[int | None, str]:
        """A short helper command of the provider's own: (exit code, stdout); (None, "") when it
        cannot run (the container is gone or the engine is down)."""
        try:
            stream = await self.engine.exec_start(self.id, ["sh", "-c", script], cwd="/", env={}, stdin=False)
        except (NotFound, SandboxError):
            return None, ""
        out, err = bytearray(), bytearray()
        try:
            await asyncio.wait_for(asyncio.to_thread(stream.communicate, None, out, err), 30)
            return await stream.exit_code(), out.decode("utf-8", "replace")
        except (TimeoutError, NotFound, SandboxError):
            return None, ""
        finally:
            stream.close()

    async def _kill_marked(self, mark: str) -> None:
        """Kill every process of one exec inside the container: the stream going away does not."""
        # frozen first, then killed: a shell whose child dies first must not run its next line
        await self._quick(
            "for round in 1 2; do hit=; for d in /proc/[0-9]*; do "
            f"grep -qsxz '{EXEC_MARK}={mark}' \"$d/environ\" && kill -STOP \"${{d#/proc/}}\" 2>/dev/null "
            "&& hit=\"$hit ${d#/proc/}\"; done; for p in $hit; do kill -9 \"$p\" 2>/dev/null; done; done; true")

    async def _oom_kills(self) -> int | None:
        """OOM kills counted by the container's memory cgroup (v1 or v2); None when it cannot be asked."""
        rc, out = await self._quick(OOM_KILLS)
        if rc is None:
            return None
        try:
            return int(out.strip() or 0) if rc == 0 else 0
        except ValueError:
            return 0

    async def upload(self, path: str, data: bytes, mode: int = 0o644) -> None:
        await self._put({path: (data, mode)})

    async def upload_files(self, files: Mapping[str, tuple[bytes, int]]) -> None:
        await self._put(files)

    async def _put(self, files: Mapping[str, tuple[bytes, int]]) -> None:
        """The files in one archive, one engine call."""
        named = ", ".join(files)
        try:
            await self.engine.call("put_archive", self.id, "/", archive(dict(files)))
        except (NotFound, SandboxError) as exc:
            await self._raise_gone(f"cannot upload {named}", str(exc))
            raise SandboxError(f"docker sandbox {self.id}: cannot upload {named}: {tail(str(exc))}",
                               FailureClass.SANDBOX_FILE) from None

    async def download(self, path: str) -> bytes:
        path = sandbox_path(path)
        for _ in range(8):  # `docker cp -L`: a symbolic link is followed to its target
            try:
                data = await asyncio.to_thread(self._archive_of, path)
            except NotFound:
                await self._raise_gone(f"cannot download {path}")
                raise SandboxError(f"{path}: no such file in sandbox {self.id}", FailureClass.SANDBOX_FILE) from None
            except SandboxError as exc:
                await self._raise_gone(f"cannot download {path}", str(exc))
                raise SandboxError(f"docker sandbox {self.id}: cannot download {path}: {tail(str(exc))}",
                                   FailureClass.SANDBOX_FILE) from None
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
                member = tar.next()
                if member is not None and member.issym():
                    target = member.linkname
                    path = target if target.startswith("/") else f"{path.rsplit('/', 1)[0] or '/'}/{target}"
                    path = sandbox_path(path)
                    continue
                if member is None or not member.isfile():
                    kind = "a directory" if member is not None and member.isdir() else "not a regular file"
                    raise SandboxError(f"{path} in sandbox {self.id} is {kind}", FailureClass.SANDBOX_FILE)
                fh = tar.extractfile(member)
                assert fh is not None
                return fh.read()
        raise SandboxError(f"{path} in sandbox {self.id}: too many levels of symbolic links", FailureClass.SANDBOX_FILE)

    def _archive_of(self, path: str) -> bytes:
        stream, _ = self.engine.sync("get_archive", self.id, path)
        return b"".join(stream)
