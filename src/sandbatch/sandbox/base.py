"""The provider-neutral sandbox API: one spec, one async handle, one provider interface.

Steps talk only to these types; switching `sandbox.provider` in the config is the only
change needed to run elsewhere. A provider module implements `Provider` and `Sandbox`
and adds one line to the registry in `sandbatch.sandbox`.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from .. import trace
from ..contracts.sandbox import SandboxSpec
from ..core.errors import InfraError, UserError
from ..core.failures import FailureClass

if TYPE_CHECKING:
    from .admission import CreateAdmission

# environment variables that make common tools (openssl, curl, git, pip/requests, node) use a
# given CA bundle; pip and node ignore the system store otherwise
CA_ENV = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO",
          "NODE_EXTRA_CA_CERTS")


# what a provider does when it loses a command's result after the command ran (exec's `lost`)
Lost = Literal["fail", "rerun", "wait"]


class ExecResult(BaseModel):
    exit_code: int
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    duration_s: float = 0.0
    # exec(lost="wait"): the transport lost the rest of the output; the exit status is the sandbox's own
    output_lost: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


# exit statuses of a command ended by SIGKILL / SIGTERM (128 + n from a shell or docker exec,
# -n from a direct child): when the sandbox itself was killed, stopped or deleted, that is an
# infrastructure failure, never the command's own result, so providers check the sandbox then
KILLED_EXIT_CODES = frozenset({137, 143, -9, -15})

State = Literal["running", "pending", "stopped", "gone", "unknown"]


class SandboxInfo(BaseModel):
    id: str
    state: State
    labels: dict[str, str] = Field(default_factory=dict)
    expires_at: str | None = None


class SandboxError(InfraError):
    def __init__(self, message: str, failure_class: FailureClass = FailureClass.SANDBOX):
        super().__init__(message, failure_class)


class ImageUnavailable(UserError):
    """A provider's preflight: a create could not have `image` (the key at fault, when the
    provider knows it, e.g. its pull policy; else the setting that names the image)."""

    def __init__(self, message: str, image: str, key: str | None = None):
        super().__init__(message, key)
        self.image = image


class SandboxGone(SandboxError):
    """The sandbox no longer exists (deleted, expired, OOM-killed)."""

    def __init__(self, message: str):
        super().__init__(message, "sandbox_gone")


# POSIX sh builtins and /proc only (the sandbox's own tools are not to be trusted). One kill(-1) freezes
# every process but pid 1 and this shell at once, so none forks away while the table is read; what
# must go on is woken again: this shell's ancestors (the provider's agent) and the image's entrypoint
# with what it started (the first-started child of pid 1 that is no ancestor: an agent's orphans are
# reparented to pid 1 later; and its descendants). The rest are killed, in rounds until one finds no
# live process not killed yet (a fork the freeze caught half-done; one SIGKILLed runs no more code);
# it prints how many it killed and how many it found in its last round.
STOP_ROUNDS = 20
STOP_PROCESSES = r"""
kill -STOP -1 2>/dev/null
keep=" 1 $$ "; p=$$
while [ "$p" -gt 1 ] && read -r line < /proc/$p/stat; do
  set -- ${line##*) }; p=$2; keep="$keep$p "
done
first=; at=
for d in /proc/[0-9]*; do
  pid=${d#/proc/}
  { read -r line < $d/stat; } 2>/dev/null || continue
  set -- ${line##*) }
  [ "$2" = 1 ] || continue
  case "$keep" in *" $pid "*) continue ;; esac
  if [ -z "$at" ] || [ "${20}" -lt "$at" ]; then first=$pid; at=${20}; fi
done
image=" $first "
for level in 1 2 3 4 5; do
  for d in /proc/[0-9]*; do
    pid=${d#/proc/}
    { read -r line < $d/stat; } 2>/dev/null || continue
    set -- ${line##*) }
    case "$image" in *" $2 "*) case "$image" in *" $pid "*) ;; *) image="$image$pid " ;; esac ;; esac
  done
done
keep="$keep$image"
for pid in $keep; do kill -CONT "$pid" 2>/dev/null; done
killed=" "; hit=; round=0
while [ "$round" -lt ROUNDS ]; do
  round=$((round + 1)); hit=
  for d in /proc/[0-9]*; do
    pid=${d#/proc/}
    case "$keep$killed" in *" $pid "*) continue ;; esac
    { read -r line < $d/stat; } 2>/dev/null || continue
    set -- ${line##*) }
    case "$1" in Z|X|x) continue ;; esac
    kill -STOP "$pid" 2>/dev/null && hit="$hit $pid"
  done
  [ -z "$hit" ] && break
  for pid in $hit; do
    kill -KILL "$pid" 2>/dev/null && killed="$killed$pid "
  done
done
set -- $killed; n=$#; set -- $hit
echo "$n $#"
""".replace("ROUNDS", str(STOP_ROUNDS))


class Sandbox(abc.ABC):
    """A live sandbox. Paths are absolute paths inside the sandbox."""

    id: str
    spec: SandboxSpec
    provider: "Provider"
    workdir: str  # the repository inside the sandbox (spec.workdir unless the provider maps it)
    tmpdir: str  # scratch space outside the repository: HOME, harness state, uploads
    # whether grading may run the tests as a user of their own (a container's files and processes are
    # its own; the local provider's are the host's)
    separate_users: bool = True

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        trace.instrument(cls, trace.SANDBOX_OPS, "sandbox")  # spans sandbox.<provider>.exec, ...

    @abc.abstractmethod
    async def exec(
        self,
        command: str | Sequence[str],
        *,
        timeout: float,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        stdin: bytes | None = None,
        lost: Lost = "fail",
    ) -> ExecResult:
        """Run a command (a string runs under `bash -c`, not a login shell, so the PATH the
        image's ENV set is kept). Never retried blindly: it may have run.

        lost: what to do when the provider's transport loses the command's result (its output's
        end and exit status) while the sandbox says the command ran: "fail" (SandboxError),
        "rerun" (the command is idempotent: once it has finished, run it again) or "wait" (its
        result is in files: once it has finished, return its exit status with the output received
        so far, `output_lost` set). Providers whose transport cannot lose a result ignore it."""

    @abc.abstractmethod
    async def upload(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Write a file, creating parent directories."""

    async def upload_files(self, files: "Mapping[str, tuple[bytes, int]]") -> None:
        """Write several files (path -> (data, mode)), creating parent directories: one round trip
        where the provider can make it one (an archive, a multi-file write), else one each."""
        for path, (data, mode) in files.items():
            await self.upload(path, data, mode)

    @abc.abstractmethod
    async def download(self, path: str) -> bytes:
        """Read a file."""

    @abc.abstractmethod
    async def status(self) -> State:
        """Current state; "gone" when it no longer exists."""

    async def delete(self) -> None:
        await self.provider.delete(self.id)

    async def ensure_alive(self, during: str) -> None:
        """SandboxGone unless the sandbox still runs: what a step read from a sandbox that was
        killed or deleted under it (by an operator, a reaper, the TTL) is not the agent's result."""
        state = await self.status()
        if state in ("gone", "stopped"):
            raise SandboxGone(f"sandbox {self.id} is {state} after {during}; its results are discarded")

    async def stop_processes(self, shell: str = "") -> int:
        """Kill every process of the sandbox but those its image started with and the command doing it
        (and what runs that command: the provider's own agent), frozen first so none forks away: how
        many were killed.
        shell: a POSIX shell to run it with (default: `bash -c`, the sandbox's own).
        Its kill(-1) needs a pid namespace of the sandbox's own (a container): a provider whose
        commands run on the host overrides this (LocalSandbox)."""
        res = await self.exec([shell, "-c", STOP_PROCESSES] if shell else STOP_PROCESSES, timeout=60)
        counts = res.stdout.split()[-2:]
        if not res.ok or len(counts) != 2 or not all(c.isdigit() for c in counts):
            raise SandboxError(f"cannot stop the processes left in sandbox {self.id}: exit {res.exit_code}"
                               f"{' (timed out)' if res.timed_out else ''}, {res.stderr.strip()[-200:]!r}",
                               FailureClass.SANDBOX_EXEC)
        if int(counts[1]):
            raise SandboxError(f"{counts[1]} processes of sandbox {self.id} still ran after {STOP_ROUNDS} rounds "
                               "of SIGSTOP and SIGKILL", FailureClass.SANDBOX_EXEC)
        return int(counts[0])

    async def restrict_network(self, proxy: tuple[str, int] | None) -> str | None:
        """Cut the running sandbox off from every address but the model proxy it reaches at
        `proxy` (host, port), a server of this host (None: from every address, loopback
        aside), for the rest of its life. Returns the host (name or address) the sandbox
        reaches the proxy at from now on, or None. Only providers whose `isolates_network` is
        True implement it."""
        raise SandboxError(f"the {self.provider.name} provider cannot restrict a sandbox's network",
                           FailureClass.SANDBOX_NETWORK)

    def map_path(self, path: str) -> str:
        """Where an absolute path of the task's image (/logs/verifier, /tests, the image's
        workdir) lives in this sandbox: itself, except on providers without a filesystem
        of their own per sandbox (local)."""
        return path


class ProviderOptions(BaseModel):
    """A provider's options block (`sandbox.<provider>`): every key with its default and meaning.
    The config schema's block is generated from it (python -m sandbatch.ops.reference)."""

    model_config = ConfigDict(extra="forbid")


class Provider(abc.ABC):
    """Creates, finds and deletes sandboxes of one kind."""

    name: str
    options_model: ClassVar[type[ProviderOptions]] = ProviderOptions
    # whether the provider can restrict a sandbox's network (Sandbox.restrict_network, a spec
    # without internet); False: its sandboxes reach whatever this host reaches (local)
    isolates_network: bool = True
    # the model proxy's (bind host, advertised host) when model.proxy leaves them null: where it
    # listens and where this provider's sandboxes reach it. None advertised: this host's address
    # on its route toward the provider's service (sandbox.proxy_address)
    proxy_hosts: ClassVar[tuple[str, str | None]] = ("0.0.0.0", None)
    # whether a sandbox runs an image: then every task needs one (its own or sandbox.default_image)
    needs_image: ClassVar[bool] = True
    # its options that say where sandboxes live and how they are reached, not what runs in them:
    # changing one reruns no agent (ops.workflow.agent_settings)
    plumbing: ClassVar[tuple[str, ...]] = ()
    # the run's shared create admission (sandbox.admission); None: creates are not paced
    admission: "CreateAdmission | None" = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        trace.instrument(cls, trace.PROVIDER_OPS, "provider")  # spans sandbox.<provider>.create, ...

    def __init__(self, options: dict[str, Any] | None = None):
        self.options = dict(options or {})

    async def admit(self) -> None:
        """Wait for the run's create admission; a provider calls it before each create call."""
        if self.admission is not None:
            with trace.span(f"sandbox.{self.name}.admission"):
                await self.admission.acquire()

    @abc.abstractmethod
    async def create(self, spec: SandboxSpec) -> Sandbox:
        """Create a sandbox that really executes commands, or raise SandboxError."""

    @abc.abstractmethod
    async def connect(self, sandbox_id: str, spec: SandboxSpec) -> Sandbox:
        """Attach to an existing sandbox; SandboxGone when it no longer exists."""

    @abc.abstractmethod
    async def list(self, labels: dict[str, str]) -> list[SandboxInfo]:
        """Sandboxes carrying all of `labels`."""

    @abc.abstractmethod
    async def delete(self, sandbox_id: str) -> bool:
        """Delete; idempotent. True if it existed."""

    async def image_after(self, spec: SandboxSpec, script: str, timeout: float) -> tuple[str, str] | None:
        """An image of spec.image in which `script` (bash, run in spec.workdir's filesystem)
        has already run, and what it printed: made once, then reused by every sandbox of the
        same image and script. None where the provider keeps no images of its own (the
        script then runs in each sandbox)."""
        return None

    @classmethod
    def service(cls, options: dict[str, Any]) -> str | None:
        """host:port of the remote service this provider's sandboxes run on (from its options);
        None for sandboxes on this host's own engine. Default: None."""
        return None

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> None:
        """UserError for options of this provider that cannot work, known without asking
        anything (called when a run is planned and by validate). Default: none."""

    async def preflight(self, images: "list[str]") -> None:
        """Before a run creates anything: UserError (with the config key at fault) when the
        provider's service does not answer, refuses the key, or cannot have one of `images`
        (the run's, rewritten) under its pull policy. Default: nothing to check."""

    async def aclose(self) -> None:
        """Release client resources (never deletes sandboxes)."""

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.aclose()
