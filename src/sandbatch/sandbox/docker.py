"""`docker` provider: each sandbox is a container on a local Docker engine.

Why the `docker` CLI and not the Python SDK: every workflow step runs in its own short
process that makes a handful of engine calls (create, a few execs, copy, delete).
Importing the SDK costs 0.1-0.2 CPU-s per process before the first call, while one CLI
call costs about 0.01 CPU-s (30 ms wall) here, so the CLI is cheaper up to a dozen calls
per process and never much worse. It is also asyncio-native through subprocesses (the SDK
is blocking and would need a thread per call), needs no new dependency, and speaks to
older engines through API version negotiation. Neither can stop a timed-out `exec` by
closing its stream, so timeouts kill inside the container either way (see `exec`).

A container carries:
- labels `<prefix><key>` for the spec's labels, `<prefix>managed=true` (so `list` sees only
  our containers) and `<prefix>expires-at` (ISO 8601, UTC): when the TTL ends, as `list`
  reports it (the keep-alive entrypoint below is what enforces it);
- a keep-alive entrypoint that replaces the image's own (some images start /bin/bash,
  which would exit at once without a terminal): `sleep <ttl_seconds>`, so a container
  nobody reaps still stops by itself when its TTL is over; under `--init` so orphans of
  killed commands are reaped instead of piling up as zombies;
- `--network none` when the spec forbids internet access;
- cpu and memory limits (no swap beyond the memory limit); the disk size is not applied
  (overlay2 needs an xfs backing filesystem with project quotas for that);
- optionally the host's CA bundle, read-only, at the image's bundle path, with the usual
  environment variables pointing at it, for hosts whose traffic goes through a TLS proxy.

Commands run through `docker exec`; HOME stays the image's (SWE-bench style images keep
their environment activation in /root/.bashrc). `tmpdir` is /tmp/sandbatch.
"""

from __future__ import annotations

import asyncio
import base64
import fcntl
import hashlib
import io
import json
import os
import posixpath
import re
import tarfile
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Sequence

from pydantic import BaseModel

from ..core.errors import InfraError, UserError
from .base import CA_ENV, KILLED_EXIT_CODES, ExecResult, Provider, Sandbox, SandboxError, SandboxGone, SandboxInfo, SandboxSpec, State

# Mirrors the defaults of `sandbox.docker` in schemas/config.schema.yaml (a test keeps the
# two equal); used when the provider is built without a validated config (tests, scripts).
DEFAULTS: dict[str, Any] = {
    "docker": "docker",
    "host": None,
    "label_prefix": "sandbatch.",
    "network": "bridge",
    "init": True,
    "pull": "missing",
    "mount_ca_bundle": False,
    "ca_bundle": "/etc/ssl/certs/ca-certificates.crt",
    "ca_bundle_target": "/etc/ssl/certs/ca-certificates.crt",
    "api_timeout": 120,
    "create_timeout": 600,
}

TMPDIR = "/tmp/sandbatch"
# the images `image_after` makes: tagged by the source image's name, the workdir and the
# script, labelled with the source image's id and the script's output (base64); `docker image rm $(docker images -q sandbatch/prepared)` frees them
PREPARED = "sandbatch/prepared"
# not under label_prefix: containers inherit an image's labels, and these are no sandbox's
FROM_LABEL, OUTPUT_LABEL = "org.sandbatch.prepared-from", "org.sandbatch.prepared-output"
KILL_SETTLE_CHECKS = 10  # x 0.2 s: how long a 137/143 waits for the engine to report a killed container
# the variable that marks every process of one exec, so a timeout can kill all of them
EXEC_MARK = "SANDBATCH_EXEC"

_GONE = re.compile(r"No such container|No such object|is not running|removal of container .* is already in progress"
                   r"|is restarting|is paused|marked for removal", re.IGNORECASE)
_IMAGE = re.compile(r"Unable to find image|No such image|pull access denied|manifest unknown"
                    r"|repository does not exist", re.IGNORECASE)
_ENGINE = re.compile(r"Cannot connect to the Docker daemon|Is the docker daemon running|error during connect",
                     re.IGNORECASE)


class ContainerState(BaseModel):
    """What the engine says about a container, beyond the provider-neutral State."""

    state: State
    status: str  # the engine's own word: running, exited, created, ...
    oom_killed: bool = False
    exit_code: int | None = None
    error: str = ""

    def describe(self) -> str:
        parts = [self.status]
        if self.exit_code is not None and self.status in ("exited", "dead"):
            parts.append(f"exit code {self.exit_code}")
        if self.oom_killed:
            parts.append("OOM-killed")
        if self.error:
            parts.append(self.error)
        return ", ".join(parts)


class SandboxOOM(SandboxGone):
    """The container was stopped by the kernel's OOM killer (its memory limit was too small)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.failure_class = "sandbox_oom"


_STATES: dict[str, State] = {
    "running": "running", "created": "pending", "restarting": "pending", "paused": "stopped",
    "exited": "stopped", "dead": "stopped", "removing": "gone",
}


def container_state(inspect: dict[str, Any]) -> ContainerState:
    st = inspect.get("State") or {}
    status = str(st.get("Status") or "unknown")
    return ContainerState(
        state=_STATES.get(status, "unknown"),
        status=status,
        oom_killed=bool(st.get("OOMKilled")),
        exit_code=st.get("ExitCode"),
        error=str(st.get("Error") or ""),
    )


_QUANTITY = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")
_UNITS = {
    "": 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
}


def memory_bytes(quantity: str) -> int:
    """A Kubernetes-style memory quantity ("512Mi", "4Gi", "1G", "1048576") in bytes."""
    m = _QUANTITY.match(str(quantity))
    if not m or m.group(2) not in _UNITS:
        raise UserError(f"resources.memory: {quantity!r} is not a memory quantity; use e.g. 512Mi or 4Gi")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def cpu_count(quantity: str) -> float:
    """A Kubernetes-style cpu quantity ("2", "0.5", "500m") in cores."""
    text = str(quantity).strip()
    try:
        return int(text[:-1]) / 1000 if text.endswith("m") else float(text)
    except ValueError:
        raise UserError(f"resources.cpu: {quantity!r} is not a cpu quantity; use e.g. 2, 0.5 or 500m") from None


def _abs(path: str) -> str:
    if not path.startswith("/"):
        raise SandboxError(f"{path!r}: sandbox paths must be absolute", "sandbox_file")
    return posixpath.normpath(path)


def _tail(data: bytes | bytearray | str, n: int = 400) -> str:
    text = data if isinstance(data, str) else bytes(data).decode("utf-8", "replace")
    text = " ".join(text.split())
    return text if len(text) <= n else "..." + text[-n:]


class DockerSandbox(Sandbox):
    def __init__(self, provider: "DockerProvider", name: str, spec: SandboxSpec):
        self.provider = provider
        self.id = name
        self.spec = spec
        self.workdir = _abs(spec.workdir)
        self.tmpdir = TMPDIR

    async def state(self) -> ContainerState:
        """The engine's view, including whether the kernel OOM-killed the container."""
        data = await self.provider.inspect(self.id)
        if data is None:
            return ContainerState(state="gone", status="missing")
        return container_state(data)

    async def status(self) -> State:
        return (await self.state()).state

    async def _raise_gone(self, context: str, detail: bytes | bytearray | str = b"") -> None:
        """Raise SandboxGone (or SandboxOOM) if the container no longer runs."""
        st = await self.state()
        if st.state == "running":
            return
        message = f"docker sandbox {self.id} {context}: container is {st.describe()}"
        if st.oom_killed:
            raise SandboxOOM(message + " (raise resources.memory)")
        raise SandboxGone(message + (f" ({_tail(detail)})" if detail else ""))

    async def exec(
        self,
        command: str | Sequence[str],
        *,
        timeout: float,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        stdin: bytes | None = None,
    ) -> ExecResult:
        # `bash -c` as OpenSandbox's execd and the local provider run it: a login shell would
        # read /etc/profile, which resets the PATH the image's ENV set (conda, ~/.local/bin)
        argv = ["bash", "-c", command] if isinstance(command, str) else list(command)
        mark = uuid.uuid4().hex
        env = {**(env or {}), EXEC_MARK: mark}
        args = ["exec", "-w", cwd or self.workdir]
        if stdin is not None:
            args.append("-i")
        for key in env:
            args += ["-e", key]  # the value travels in the CLI's environment, not its argv
        args += [self.id, *argv]

        start = time.monotonic()
        proc = await self.provider.spawn(args, env=env, stdin=stdin is not None)
        out, err = bytearray(), bytearray()
        # shielded so that a timeout keeps what the command printed before it was killed
        io_done = asyncio.ensure_future(asyncio.gather(
            _pump(proc.stdout, out), _pump(proc.stderr, err), _feed(proc, stdin), proc.wait()))
        timed_out = False
        try:
            await asyncio.wait_for(asyncio.shield(io_done), timeout=timeout)
        except TimeoutError:
            timed_out = True
            await self._kill_marked(mark)
            try:
                await asyncio.wait_for(asyncio.shield(io_done), timeout=5.0)
            except TimeoutError:
                _kill(proc)
                await io_done
        except asyncio.CancelledError:
            await asyncio.shield(self._kill_marked(mark))
            _kill(proc)
            io_done.cancel()
            raise
        code = proc.returncode if proc.returncode is not None else -1
        stderr = err.decode("utf-8", "replace")
        if not timed_out and (code in KILLED_EXIT_CODES or (code != 0 and (_GONE.search(stderr)
                                                                         or _ENGINE.search(stderr)))):
            # killed, or the CLI could not reach the container: whether the sandbox (or the
            # engine) is the cause is asked of the engine, not read from what the command printed.
            # The engine records a killed container's exit a moment after the exec ends: ask
            # again for a little while before taking the status for the command's own
            for _ in range(KILL_SETTLE_CHECKS if code in KILLED_EXIT_CODES else 1):
                await self._raise_gone(f"command ended with exit {code}", err)
                if code in KILLED_EXIT_CODES:
                    await asyncio.sleep(0.2)
        if not timed_out and code == 137 and await self._oom_kills() > 0:
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

    async def _kill_marked(self, mark: str) -> None:
        """Kill every process of one exec inside the container: the CLI going away does not."""
        script = (
            "for round in 1 2; do for d in /proc/[0-9]*; do "
            f"grep -qsxz '{EXEC_MARK}={mark}' \"$d/environ\" && kill -9 \"${{d#/proc/}}\" 2>/dev/null; "
            "done; done; true"
        )
        try:
            await self.provider.run(["exec", self.id, "sh", "-c", script], timeout=30, check=False)
        except SandboxError:
            pass  # the container is gone or the engine is down: nothing left to kill here

    async def _oom_kills(self) -> int:
        """OOM kills counted by the container's memory cgroup (v1 or v2)."""
        script = ("cat /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null"
                  " | awk '$1 == \"oom_kill\" {n += $2} END {print n + 0}'")
        try:
            rc, out, _ = await self.provider.run(["exec", self.id, "sh", "-c", script], timeout=30, check=False)
            return int(out.strip() or 0) if rc == 0 else 0
        except (SandboxError, ValueError):
            return 0

    async def upload(self, path: str, data: bytes, mode: int = 0o644) -> None:
        path = _abs(path)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            tar.addfile(info, io.BytesIO(data))
        # no directory entries: the engine creates missing parents and leaves existing ones alone
        rc, _, err = await self.provider.run(["cp", "-", f"{self.id}:/"], input=buf.getvalue(), check=False)
        if rc != 0:
            await self._raise_gone(f"cannot upload {path}", err)
            raise SandboxError(f"docker sandbox {self.id}: cannot upload {path}: {_tail(err)}", "sandbox_file")

    async def download(self, path: str) -> bytes:
        path = _abs(path)
        rc, out, err = await self.provider.run(["cp", "-L", f"{self.id}:{path}", "-"], check=False)
        if rc != 0:
            await self._raise_gone(f"cannot download {path}", err)
            if re.search(r"Could not find the file|No such container:path", err.decode("utf-8", "replace")):
                raise SandboxError(f"{path}: no such file in sandbox {self.id}", "sandbox_file")
            raise SandboxError(f"docker sandbox {self.id}: cannot download {path}: {_tail(err)}", "sandbox_file")
        with tarfile.open(fileobj=io.BytesIO(out), mode="r:") as tar:
            member = tar.next()
            if member is None or not member.isfile():
                kind = "a directory" if member is not None and member.isdir() else "not a regular file"
                raise SandboxError(f"{path} in sandbox {self.id} is {kind}", "sandbox_file")
            fh = tar.extractfile(member)
            assert fh is not None
            return fh.read()


async def _pump(stream: asyncio.StreamReader | None, buf: bytearray) -> None:
    while stream is not None and (chunk := await stream.read(1 << 16)):
        buf += chunk


async def _feed(proc: asyncio.subprocess.Process, data: bytes | None) -> None:
    if data is None or proc.stdin is None:
        return
    try:
        proc.stdin.write(data)
        await proc.stdin.drain()
        proc.stdin.close()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the command ended without reading all of its input


def _kill(proc: asyncio.subprocess.Process) -> None:
    try:
        proc.kill()
    except ProcessLookupError:
        pass


class DockerProvider(Provider):
    name = "docker"

    def __init__(self, options: dict[str, Any] | None = None):
        super().__init__({**DEFAULTS, **(options or {})})
        o = self.options
        self.cli = str(o["docker"])
        self.prefix = str(o["label_prefix"])
        self.api_timeout = float(o["api_timeout"])
        self.create_timeout = float(o["create_timeout"])
        if o["pull"] not in ("missing", "never", "always"):
            raise UserError(f"sandbox.docker.pull: {o['pull']!r} is not allowed; choose one of: missing, never, always")

    # --- the CLI ---------------------------------------------------------------------

    def _env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        if self.options.get("host"):
            env["DOCKER_HOST"] = str(self.options["host"])
        env.update(extra or {})
        return env

    async def spawn(self, args: Sequence[str], *, env: dict[str, str] | None = None,
                    stdin: bool = False) -> asyncio.subprocess.Process:
        try:
            return await asyncio.create_subprocess_exec(
                self.cli, *args,
                env=self._env(env),
                stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except FileNotFoundError:
            raise SandboxError(
                f"docker CLI {self.cli!r} not found; install Docker (scripts/services/docker.sh) "
                "or set sandbox.docker.docker to its path", "sandbox") from None

    async def run(self, args: Sequence[str], *, input: bytes | None = None, env: dict[str, str] | None = None,
                  timeout: float | None = None, check: bool = True) -> tuple[int, bytes, bytes]:
        """One CLI call: (exit code, stdout, stderr). Engine trouble raises SandboxError."""
        proc = await self.spawn(args, env=env, stdin=input is not None)
        limit = timeout or self.api_timeout
        try:
            out, err = await asyncio.wait_for(proc.communicate(input), timeout=limit)
        except TimeoutError:
            _kill(proc)
            await proc.communicate()
            raise SandboxError(f"`docker {args[0]}` did not answer within {limit:g} s", "sandbox") from None
        except asyncio.CancelledError:
            _kill(proc)
            raise
        rc = proc.returncode if proc.returncode is not None else -1
        if rc != 0 and _ENGINE.search(err.decode("utf-8", "replace")):
            raise SandboxError(f"Docker engine not reachable ({_tail(err, 200)}); "
                               "start it with scripts/services/docker.sh", "sandbox")
        if rc != 0 and check:
            raise SandboxError(f"`docker {args[0]}` failed: {_tail(err)}", "sandbox")
        return rc, out, err

    async def inspect(self, name: str) -> dict[str, Any] | None:
        """`docker inspect` of one container, or None when it does not exist."""
        found = await self._inspect_many([name])
        return found[0] if found else None

    async def _inspect_many(self, names: Sequence[str]) -> list[dict[str, Any]]:
        if not names:
            return []
        # missing containers make the exit code 1 but the others are still printed
        _, out, _ = await self.run(["container", "inspect", *names], check=False)
        try:
            return json.loads(out or b"[]")
        except ValueError:
            return []

    # --- labels ----------------------------------------------------------------------

    def _labels(self, spec: SandboxSpec, expires: datetime) -> dict[str, str]:
        labels = {f"{self.prefix}{k}": str(v) for k, v in spec.labels.items()}
        labels[f"{self.prefix}managed"] = "true"
        labels[f"{self.prefix}expires-at"] = expires.isoformat(timespec="seconds")
        return labels

    def _info(self, data: dict[str, Any]) -> SandboxInfo:
        raw = (data.get("Config") or {}).get("Labels") or {}
        internal = {f"{self.prefix}managed", f"{self.prefix}expires-at"}
        labels = {k[len(self.prefix):]: v for k, v in raw.items() if k.startswith(self.prefix) and k not in internal}
        return SandboxInfo(
            id=str(data.get("Name", "")).lstrip("/") or str(data.get("Id", ""))[:12],
            state=container_state(data).state,
            labels=labels,
            expires_at=raw.get(f"{self.prefix}expires-at"),
        )

    # --- the Provider API ------------------------------------------------------------

    def _ca_mount(self, env: dict[str, str]) -> list[str]:
        if not self.options["mount_ca_bundle"]:
            return []
        source = Path(str(self.options["ca_bundle"])).expanduser()
        if not source.is_file():
            raise UserError(f"sandbox.docker.ca_bundle: {source} is not a file on this host; "
                            "point it at the host's CA bundle or set sandbox.docker.mount_ca_bundle: false")
        target = _abs(str(self.options["ca_bundle_target"]))
        for key in CA_ENV:
            env.setdefault(key, target)
        return ["--mount", f"type=bind,source={source.resolve()},target={target},readonly"]

    async def create(self, spec: SandboxSpec) -> DockerSandbox:
        if not spec.image:
            raise UserError("sandbox image: the docker provider needs an image; set the task's image "
                            "or use sandbox.provider: local")
        await self.admit()
        name = f"sandbatch-{uuid.uuid4().hex[:12]}"
        sb = DockerSandbox(self, name, spec)
        expires = datetime.now(timezone.utc) + timedelta(seconds=spec.ttl_seconds)
        env = dict(spec.env)
        args = ["run", "--detach", "--name", name, "--workdir", sb.workdir, "--pull", str(self.options["pull"])]
        args += self._ca_mount(env)
        for key, value in self._labels(spec, expires).items():
            args += ["--label", f"{key}={value}"]
        for key in env:
            args += ["--env", key]  # values come from the CLI's environment (not visible in ps)
        if self.options["init"]:
            args.append("--init")
        # the model proxy runs on this host: let sandboxes reach it by a stable name
        args += ["--add-host", "host.docker.internal:host-gateway"]
        args += ["--network", "none" if not spec.allow_internet else str(self.options["network"])]
        if spec.resources.cpu:
            args += ["--cpus", f"{cpu_count(spec.resources.cpu):g}"]
        if spec.resources.memory:
            limit = memory_bytes(spec.resources.memory)
            args += ["--memory", str(limit), "--memory-swap", str(limit)]
        entrypoint = list(spec.entrypoint or ["sleep", str(spec.ttl_seconds)])
        args += ["--entrypoint", entrypoint[0], spec.image, *entrypoint[1:]]

        rc, _, err = await self.run(args, env=env, timeout=self.create_timeout, check=False)
        if rc != 0:
            await self.delete(name)  # `run` may have created the container before failing to start it
            text = err.decode("utf-8", "replace")
            failure = "image" if _IMAGE.search(text) else "sandbox_create"
            raise InfraError(f"docker sandbox for image {spec.image}: `docker run` failed: {_tail(text)}", failure)
        # proves that commands run, and makes the scratch directory (the workdir exists via --workdir)
        try:
            res = await sb.exec(["mkdir", "-p", TMPDIR], timeout=self.api_timeout, cwd="/")
        except SandboxError as exc:
            await self.delete(name)
            raise SandboxError(f"docker sandbox {name} (image {spec.image}) stopped right after start: {exc}",
                               "sandbox_create") from exc
        if not res.ok:
            await self.delete(name)
            raise SandboxError(f"docker sandbox {name} (image {spec.image}) cannot run commands: "
                               f"{_tail(res.stderr or res.stdout)}", "sandbox_create")
        return sb

    async def image_after(self, spec: SandboxSpec, script: str, timeout: float) -> tuple[str, str] | None:
        """The image made by running `script` in a container of spec.image, then `docker
        commit` (the source image's entrypoint, command and workdir restored), built on first
        use under a lock on this host and reused; one `docker image inspect` per sandbox
        after that. It is rebuilt when the source image's id changes (a newer pull). None
        when the source image is not on the engine yet (its first sandbox pulls it) or
        `pull: always` asks for fresh images."""
        if not spec.image or self.options["pull"] == "always":
            return None
        key = hashlib.sha256("\0".join([spec.image, spec.workdir, script]).encode()).hexdigest()[:24]
        tag = f"{PREPARED}:{key}"
        lock = Path(tempfile.gettempdir()) / f"sandbatch-prepared-{key}.lock"
        with open(lock, "a") as fh:
            locked = False
            try:
                while True:  # one build per host; the others wait here, then find it
                    source, output = await self._prepared(spec.image, tag)
                    if source is None or output is not None:
                        return None if source is None else (tag, output)
                    if locked:
                        return tag, await self._build_after(spec, source, script, tag, timeout)
                    try:
                        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        locked = True
                    except BlockingIOError:
                        await asyncio.sleep(0.5)
            finally:
                if locked:
                    fcntl.flock(fh, fcntl.LOCK_UN)

    async def _prepared(self, image: str, tag: str) -> tuple[dict[str, Any] | None, str | None]:
        """(the source image's inspect data or None, the output of `tag` when it was made from it)."""
        found = await self._inspect_images([image, tag])
        made = next((d for d in found if tag in (d.get("RepoTags") or [])), None)
        source = next((d for d in found if d is not made), None)
        if source is None or made is None:
            return source, None
        labels = (made.get("Config") or {}).get("Labels") or {}
        if labels.get(FROM_LABEL) != source["Id"]:
            return source, None  # made from an older pull of the image
        return source, base64.b64decode(labels.get(OUTPUT_LABEL, "")).decode()

    async def _inspect_images(self, names: Sequence[str]) -> list[dict[str, Any]]:
        # a missing image makes the exit code 1; the others are still printed
        _, out, _ = await self.run(["image", "inspect", *names], check=False)
        try:
            return json.loads(out or b"[]")
        except ValueError:
            return []

    async def _build_after(self, spec: SandboxSpec, source: dict[str, Any], script: str, tag: str,
                           timeout: float) -> str:
        # no labels (the image would pass them to every container made from it), no network,
        # no environment of ours; removed by itself when its keep-alive ends
        name = f"sandbatch-prepare-{uuid.uuid4().hex[:12]}"
        rc, _, err = await self.run(["run", "--detach", "--rm", "--name", name, "--network", "none",
                                     "--workdir", _abs(spec.workdir), "--entrypoint", "", source["Id"],
                                     "sleep", str(int(timeout) + 120)], timeout=self.create_timeout, check=False)
        if rc != 0:
            raise SandboxError(f"preparing image {spec.image}: `docker run` failed: {_tail(err)}", "sandbox_prepare")
        try:
            res = await DockerSandbox(self, name, spec).exec(script, timeout=timeout, cwd="/")
            if not res.ok:
                raise SandboxError(f"preparing the repository failed (exit {res.exit_code}): "
                                   f"{res.stderr.strip()[-300:]}", "sandbox_prepare")
            config = source.get("Config") or {}
            # an empty entrypoint cannot be set by --change: the container has none already
            changes = [f"ENTRYPOINT {json.dumps(config['Entrypoint'])}"] if config.get("Entrypoint") else []
            changes += [f"CMD {json.dumps(config.get('Cmd') or [])}",
                       f"WORKDIR {config.get('WorkingDir') or '/'}",
                       f"LABEL {FROM_LABEL}={source['Id']}",
                       f"LABEL {OUTPUT_LABEL}={base64.b64encode(res.stdout.encode()).decode()}"]
            await self.run(["commit", *(a for c in changes for a in ("--change", c)), name, tag],
                           timeout=self.create_timeout)
            return res.stdout
        finally:
            await self.delete(name)

    async def connect(self, sandbox_id: str, spec: SandboxSpec) -> DockerSandbox:
        sb = DockerSandbox(self, sandbox_id, spec)
        await sb._raise_gone("cannot be reattached")
        return sb

    async def list(self, labels: dict[str, str]) -> list[SandboxInfo]:
        args = ["ps", "--all", "--quiet", "--no-trunc", "--filter", f"label={self.prefix}managed=true"]
        for key, value in labels.items():
            args += ["--filter", f"label={self.prefix}{key}={value}"]
        _, out, _ = await self.run(args)
        ids = out.decode().split()
        return sorted((self._info(d) for d in await self._inspect_many(ids)), key=lambda i: i.id)

    async def delete(self, sandbox_id: str) -> bool:
        rc, out, err = await self.run(["rm", "--force", "--volumes", sandbox_id], check=False)
        text = err.decode("utf-8", "replace")
        if "No such container" in text:
            return False
        if rc == 0:
            # `rm --force` of a missing container succeeds silently on newer engines; only a
            # container that existed is echoed back
            return bool(out.strip())
        if "already in progress" in text:
            return True
        raise SandboxError(f"cannot delete docker sandbox {sandbox_id}: {_tail(text)}", "sandbox")
