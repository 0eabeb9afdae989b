"""`opensandbox` provider: sandboxes on an OpenSandbox server through the `opensandbox` SDK.

The only module that imports the SDK (the registry imports it lazily). What it adds on top
of the SDK, and why:

- Every sandbox is labelled (spec labels + a per-create nonce) and gets a TTL: the server
  has no idle timeout, and a create whose POST timed out can leave a sandbox the client
  never learned about. After such a failure the nonce finds the strays and they are
  deleted; `sandbatch.sandbox.reaper.reap` sweeps whatever is left by label.
- Creates are retried with jittered exponential backoff on 5xx, 429 (Retry-After
  honoured) and connection errors; the SDK never retries a POST on a status code.
  Every attempt is first admitted by the run's shared bucket (sandbox/admission.py),
  and a 429 or 503 slows that bucket down for every step process of the run.
- Only the SDK's public API: `Sandbox.create` / `Sandbox.connect` (endpoint lookups
  included; no health check, the probe below is a real command), `SandboxManager` for
  calls not tied to one sandbox, and httpx's own transport under the SDK's retrying one.
  Against the real server at concurrency 64 the client needs 20-30 ms of CPU per
  sandbox, 1-3 % of a core (README, "Performance figures"): the server and Docker bound a
  run, not the client, so a faster transport or a leaner create buys nothing there.
- After create a probe command must print the expected output before the deadline
  (it also makes the scratch directory and the workdir, which the image may lack and
  execd refuses as a command's cwd); a sandbox that fails it is deleted. Its retries wait
  0.1 s, doubling up to `probe.interval`: execd is usually up at once or moments later.
- Every sandbox's environment sets execd's stream tail (EXECD_API_GRACE_SHUTDOWN, option
  `create.execd_grace`, 50 ms): execd keeps a finished command's stream open that long
  after its last event, by default 1 s, which every command would otherwise wait.
- Commands: a 502/503/429 or a refused connection before the stream starts means execd
  did not take the command (it is still binding), so the command is sent again, a
  bounded number of times. Any other 4xx is execd refusing the request: definitive,
  nothing ran, not retried. Anything after the stream starts (a broken stream, a
  timeout) may have run the command and is never retried. Every command has the
  server-side timeout plus a client-side asyncio deadline, because the SDK's stream has
  no read timeout.
- A dead sandbox (deleted, expired, OOM-killed, failed) surfaces as SandboxGone.
- Idempotent requests (get, list, delete, downloads) are retried by the SDK's transport.
- Every SDK client shares one connection pool of `max_connections` (at most
  KEEPALIVE_POOL of them kept idle); keep-alive expiry stays below the server's so a reused connection is not one the server is closing
  ("Server disconnected").
- SDK telemetry is off (OPENSANDBOX_DISABLE_METRICS=1 and `disable_metrics`).
- Network (option `network_policy`, on by default): every sandbox gets an egress policy, so
  that the server starts its egress sidecar: deny-all for a sandbox without internet (grading),
  allow-all for an agent's (its harness installs), replaced by deny-all but the model proxy's
  host before the agent runs (`restrict_network`, a PUT of the lifecycle API's
  `/sandboxes/{id}/networkpolicy`: the SDK's Sandbox only patches rules, which keeps the
  default action). Egress rules name hosts, not ports: every port of the proxy's host stays
  reachable. A server without an egress image refuses every policy: the create fails with a
  line saying how to configure it, or to turn `network_policy` off (then nothing is
  restricted and the rollouts record it).

Command output arrives as lines (execd splits on CR/LF and drops the terminators); the
text is rebuilt with "\\n" after each line, so CRs and a missing final newline are not
preserved. Move exact bytes with download().

A provider holds HTTP connections bound to the event loop that first used it: use one
provider per event loop and `aclose()` it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import re
import shlex
import time
import uuid
from datetime import timedelta
from typing import Any, Literal, Mapping

os.environ.setdefault("OPENSANDBOX_DISABLE_METRICS", "1")  # before the SDK is imported

from importlib.metadata import version as _installed  # noqa: E402

import httpx  # noqa: E402  (the SDK's own HTTP client)
from packaging.specifiers import SpecifierSet  # noqa: E402
from opensandbox import Sandbox as SdkSandbox  # noqa: E402
from opensandbox.config import ConnectionConfig  # noqa: E402
from opensandbox.exceptions import (  # noqa: E402
    InvalidArgumentException,
    SandboxApiException,
    SandboxException,
    SandboxRateLimitException,
)
from opensandbox.manager import SandboxManager  # noqa: E402
from opensandbox.models.execd import ExecutionHandlers, RunCommandOpts  # noqa: E402
from opensandbox.models.filesystem import WriteEntry  # noqa: E402
from opensandbox.models.sandboxes import NetworkPolicy, NetworkRule, SandboxFilter, SandboxImageSpec  # noqa: E402
from opensandbox.transport import RetryAsyncTransport, RetryPolicy  # noqa: E402

from pydantic import ConfigDict, Field  # noqa: E402

from .. import trace  # noqa: E402

from ..core.errors import Collector, UserError  # noqa: E402
from ..core.failures import FailureClass
from ..core.ids import LABEL_MAX, label_value  # noqa: E402
from ..core.util import backoff_delay  # noqa: E402
from .base import (  # noqa: E402
    KILLED_EXIT_CODES,
    ExecResult,
    Lost,
    Provider,
    ProviderOptions,
    Sandbox,
    SandboxError,
    SandboxGone,
    SandboxInfo,
    SandboxSpec,
    State,
)

log = logging.getLogger(__name__)

# the opensandbox SDK versions this module is tested with (pyproject.toml declares the same;
# tests/test_opensandbox_sdk_range.py runs the provider on both ends against the real server)
SDK_VERSIONS = ">=1.1.0,<1.2"

TMPDIR = "/tmp/sandbatch"
CREATE_LABEL = "sandbatch-create"  # one value per create() call: finds that call's strays
PAGE_SIZE = 200  # the server's maximum
# idle connections kept for reuse: httpcore checks every idle connection (a socket poll
# each) on every request, so a large idle pool costs more CPU than the connects it saves
# (stand-in benchmark, 200 sandboxes at 64: 44 ms of client CPU per sandbox with 128
# kept, 11-12 with 16, 12 with 8, 19 with 32)
KEEPALIVE_POOL = 16
# what the SDK's Sandbox.create sends when no entrypoint or resource limits are given
SDK_DEFAULT_ENTRYPOINT = ("tail", "-f", "/dev/null")
SDK_DEFAULT_RESOURCE = {"cpu": "1", "memory": "2Gi"}
# execd keeps every command's stream open this long after the command ended (its default 1 s)
EXECD_GRACE_ENV = "EXECD_API_GRACE_SHUTDOWN"
PROBE_FIRST_WAIT = 0.1  # seconds before the probe's second attempt; doubles up to probe.interval
# a command whose stream lost its end: how often execd is asked whether it finished (backoff)
OUTCOME_POLL, OUTCOME_POLL_MAX = 0.2, 2.0

_STATES: dict[str, State] = {
    "running": "running", "pending": "pending", "pausing": "stopped", "paused": "stopped",
    "stopping": "gone", "terminated": "gone", "failed": "gone",
}
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


# --- options ------------------------------------------------------------------------------

class OpenSandboxConnectionOptions(ProviderOptions):
    """How to reach the OpenSandbox server."""

    domain: str | None = Field('localhost:8080', description=(
        'Host and port of the lifecycle API (no scheme; the scheme is `protocol`).'))
    domain_env: str | None = Field(None, description=(
        'Name of an environment variable that, when set and non-empty, replaces domain (host:port; a '
        'value with http:// or https:// sets protocol too).'))
    protocol: Literal['http', 'https'] = Field('http', description=(
        'Scheme of the lifecycle API and of the in-sandbox (execd) URLs.'))
    api_key_env: str | None = Field('OPEN_SANDBOX_API_KEY', description=(
        'Name of the environment variable holding the API key (the key itself is never stored); null = no'
        ' key.'))
    request_timeout: float = Field(30, gt=0, description=(
        "Seconds one HTTP request may take (a command's stream is bounded by its own timeout instead)."))
    keep_alive_expiry: float = Field(3, gt=0, description=(
        "Seconds an idle connection is kept for reuse; keep it below the server's keep-alive timeout."))
    max_connections: int = Field(128, ge=1, description='Most HTTP connections open at once.')
    use_server_proxy: bool = Field(False, description=(
        "Reach execd through the server's proxy, for clients that cannot reach sandboxes directly."))


class OpenSandboxResources(ProviderOptions):
    """Resource limits; the spec's cpu and memory override these keys. A model, not a mapping,
    so that a block giving only some keys keeps the defaults of the others."""

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, str] = Field(init=False)  # other limits, passed to the server as given

    cpu: str = Field('2', description="CPUs of each sandbox.")
    memory: str = Field('4Gi', description="Memory of each sandbox.")


class OpenSandboxCreateOptions(ProviderOptions):
    """How sandboxes are created."""

    ready_timeout: float = Field(120, gt=0, description=(
        "Seconds for the server to publish the sandbox's endpoints after the create call."))
    resources: OpenSandboxResources = Field(default_factory=OpenSandboxResources, description=(
        "Resource limits; the spec's cpu and memory override these keys; other keys go to the server as given."))
    resource_requests: dict[str, str] | None = Field(None, description=(
        "Resource requests (Kubernetes runtime); null = the server's default."))
    execd_grace: str | None = Field('50ms', pattern='^[0-9]+(\\.[0-9]+)?(ns|us|ms|s|m)$', description=(
        "How long execd keeps a command's stream open after the command has finished and its last event "
        "was sent (execd's EXECD_API_GRACE_SHUTDOWN, a Go duration, set in every sandbox's environment; a"
        " task's own value wins). execd's default, 1s, adds a second of waiting to every command; null = "
        "execd's default."))
    image_pull_policy: Literal['Always', 'IfNotPresent', 'Never'] | None = Field(None, description=(
        "Sent as the create extension imagePullPolicy; null = the server's configured policy."))
    retries: int = Field(4, ge=0, description=(
        'Extra create attempts after 5xx, 429 and connection errors (strays of failed attempts are '
        'deleted).'))
    backoff_initial: float = Field(1.0, ge=0, description=(
        'Seconds before the first create retry; doubles per retry, with jitter (Retry-After wins).'))
    backoff_max: float = Field(30, ge=0, description='Longest wait between create retries, in seconds.')


class OpenSandboxProbeOptions(ProviderOptions):
    """A command that must succeed after create; a sandbox failing it is deleted."""

    command: str = Field('echo sandbatch-ready', description=(
        'Shell command run after `mkdir -p /tmp/sandbatch`; it is retried, so it must be idempotent.'))
    expected: str | None = Field('sandbatch-ready', description=(
        'A line the probe must print; null = exit status 0 is enough.'))
    timeout: float = Field(120, gt=0, description='Seconds after create within which the probe must pass.')
    interval: float = Field(1.0, gt=0, description=(
        'Longest wait between probe attempts (the first wait is 0.1 s, doubling up to this).'))


class OpenSandboxOperationsOptions(ProviderOptions):
    """Retries and deadlines of operations on a live sandbox."""

    retries: int = Field(3, ge=0, description=(
        'Retries of idempotent requests (get, list, delete, file reads and writes).'))
    exec_retries: int = Field(5, ge=0, description=(
        'Resends of a command that execd certainly did not start (502/503 or refused connection while it '
        'binds).'))
    backoff_initial: float = Field(0.5, ge=0, description=(
        'Seconds before the first retry of an operation; doubles per retry, with jitter.'))
    backoff_max: float = Field(10, ge=0, description='Longest wait between operation retries, in seconds.')
    timeout: float = Field(300, gt=0, description=(
        'Client-side deadline in seconds of one non-command operation, retries included.'))
    exec_grace: float = Field(30, ge=0, description=(
        "Seconds past a command's own timeout before the client gives up on its stream."))


class OpenSandboxOptions(ProviderOptions):
    """Options of the opensandbox provider (an OpenSandbox server, through the opensandbox SDK)."""

    network_policy: bool = Field(True, description=(
        "Give every sandbox an egress policy (the server's egress sidecar, which needs its [egress] image"
        " configured): none for grading, the model proxy's host only while the agent runs. false = "
        'nothing is restricted (for a server without the sidecar); every rollout then records its network'
        ' as not enforced.'))
    connection: OpenSandboxConnectionOptions = Field(default_factory=OpenSandboxConnectionOptions, description=(
        'How to reach the OpenSandbox server.'))
    create: OpenSandboxCreateOptions = Field(default_factory=OpenSandboxCreateOptions, description=(
        'How sandboxes are created.'))
    probe: OpenSandboxProbeOptions = Field(default_factory=OpenSandboxProbeOptions, description=(
        'A command that must succeed after create; a sandbox failing it is deleted.'))
    operations: OpenSandboxOperationsOptions = Field(default_factory=OpenSandboxOperationsOptions, description=(
        'Retries and deadlines of operations on a live sandbox.'))


# --- labels -------------------------------------------------------------------------------

def metadata_for(labels: dict[str, str]) -> dict[str, str]:
    """Labels as OpenSandbox metadata: Kubernetes label rules, `opensandbox.io/` reserved.

    Values are normally sanitised already (sandbatch.core.ids.label_value); an invalid one is
    sanitised the same way here, so create and list always agree on it. Keys come from
    code and config, so a bad key is an error.
    """
    out: dict[str, str] = {}
    for key, value in labels.items():
        if key.startswith("opensandbox.io/"):
            raise UserError(f"sandbox label {key!r}: the prefix opensandbox.io/ is reserved by OpenSandbox; "
                            "rename the label")
        prefix, _, name = key.rpartition("/")
        if (prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix))) \
                or len(name) > LABEL_MAX or not _LABEL_NAME.match(name):
            raise UserError(f"sandbox label key {key!r} is not a valid Kubernetes label key; use letters, "
                            "digits, '-', '_', '.' (at most 63, alphanumeric at both ends)")
        value = str(value)
        out[key] = value if (value == "" or (len(value) <= LABEL_MAX and _LABEL_NAME.match(value))) \
            else label_value(value)
    return out


# --- errors and backoff ---------------------------------------------------------------------

def _status(exc: BaseException) -> int | None:
    return getattr(exc, "status_code", None) if isinstance(exc, SandboxApiException) else None


def _pre_send(exc: BaseException) -> bool:
    """True when the request certainly never reached the server (connection refused)."""
    cause = exc.__cause__ if isinstance(exc, SandboxException) else exc
    return isinstance(cause, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout))


def _retry_after(exc: BaseException) -> float | None:
    if isinstance(exc, SandboxRateLimitException) and exc.retry_after is not None:
        return exc.retry_after.total_seconds()
    return None


def _retry_delay(attempt: int, initial: float, cap: float, exc: BaseException | None = None) -> float:
    """Seconds before retry `attempt` (0-based): the server's Retry-After (at most 60 s) when it
    sent one, else the shared jittered exponential backoff."""
    asked = _retry_after(exc) if exc is not None else None
    return min(max(asked, 0.0), 60.0) if asked is not None else backoff_delay(attempt, initial, cap)


def _short_message(exc: BaseException) -> str:
    """The exception's message (its type when it has none), cut to 300 characters for an error line."""
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) <= 300 else text[:300] + "..."


def check_sdk(installed: str) -> None:
    """UserError unless the installed SDK is one the provider is tested with."""
    if installed not in SpecifierSet(SDK_VERSIONS):
        raise UserError(f"the opensandbox provider needs the opensandbox SDK {SDK_VERSIONS}, but {installed} is "
                        f"installed; run: pip install 'opensandbox{SDK_VERSIONS}'")


# --- the sandbox ---------------------------------------------------------------------------

class OpenSandboxSandbox(Sandbox):

    def __init__(self, provider: "OpenSandboxProvider", sdk: SdkSandbox, spec: SandboxSpec):
        self.provider = provider
        self.sdk = sdk  # the SDK's sandbox: its execd clients run commands and move files
        self.id = sdk.id
        self.spec = spec
        self.workdir = spec.workdir
        self.tmpdir = TMPDIR
        self.commands = sdk.commands
        self.files = sdk.files

    # commands ----------------------------------------------------------------------------
    async def exec(self, command, *, timeout, cwd=None, env=None, stdin=None, lost: Lost = "fail") -> ExecResult:
        # execd runs the text with `bash -c` (as the local provider does); a list is quoted
        # into the same form, so it runs with its arguments exactly as given
        text = command if isinstance(command, str) else shlex.join(list(command))
        stdin_path = None
        if stdin is not None:
            # execd has no stdin: pass it through a file
            stdin_path = f"{TMPDIR}/stdin-{uuid.uuid4().hex}"
            await self.upload(stdin_path, stdin, 0o600)
            text = f"{{ {text}\n}} < {stdin_path}"
        try:
            return await self._run(text, timeout=timeout, cwd=cwd or self.workdir, env=env,
                                   retries=self.provider.ops["exec_retries"], lost=lost)
        finally:
            if stdin_path is not None:
                await self._quiet(self.files.delete_files([stdin_path]))

    async def _run(self, text: str, *, timeout: float, cwd: str | None, env: dict[str, str] | None,
                   retries: int, lost: Lost = "fail") -> ExecResult:
        ops = self.provider.ops
        opts = RunCommandOpts(working_directory=cwd, timeout=timedelta(seconds=max(timeout, 0.001)),
                              envs=dict(env) if env else None)
        for attempt in range(retries + 1):
            stdout: list[str] = []
            stderr: list[str] = []

            async def on_stdout(msg, _out=stdout):
                _out.append(msg.text)

            async def on_stderr(msg, _err=stderr):
                _err.append(msg.text)

            handlers = ExecutionHandlers(on_stdout=on_stdout, on_stderr=on_stderr, skip_accumulation=True)
            start = time.monotonic()
            try:
                execution = await asyncio.wait_for(
                    self.commands.run(text, opts=opts, handlers=handlers),
                    timeout=timeout + ops["exec_grace"],
                )
            except asyncio.TimeoutError:
                # the server did not stop it in time; leaving the stream makes execd kill it
                return ExecResult(exit_code=-1, stdout=_join(stdout), stderr=_join(stderr), timed_out=True,
                                  duration_s=time.monotonic() - start)
            except SandboxException as exc:
                status = _status(exc)
                if status is not None and 400 <= status < 500 and status != 429:
                    # execd validated the request and refused it (e.g. a working directory
                    # that does not exist): a definitive answer, nothing ran
                    await self._raise_if_gone(exc)
                    raise SandboxError(f"sandbox {self.id}: execd refused the command, which did not run "
                                       f"(HTTP {status}: {_short_message(exc)})", FailureClass.SANDBOX_EXEC) from exc
                not_started = status in (429, 502, 503) or _pre_send(exc)
                if not_started and attempt < retries:
                    await self._raise_if_gone(exc)
                    trace.event("retry", attempt=attempt + 1, error=_short_message(exc), status=status)
                    await asyncio.sleep(_retry_delay(attempt, ops["backoff_initial"], ops["backoff_max"]))
                    continue
                await self._raise_if_gone(exc)
                if not_started:
                    raise SandboxError(f"sandbox {self.id}: execd did not accept the command after "
                                       f"{attempt + 1} attempts ({_short_message(exc)})",
                                       FailureClass.SANDBOX_EXEC) from exc
                raise SandboxError(f"sandbox {self.id}: command failed in transit and may have run, so it is "
                                   f"not retried ({_short_message(exc)})", FailureClass.SANDBOX_EXEC) from exc
            duration = time.monotonic() - start
            code = execution.exit_code
            if code is None and duration >= timeout * 0.95:
                # execd stopped it at its timeout and, on a loaded host, ended the stream before it
                # sent the exit status: the command had all its time, which is a timeout, not an outage
                return ExecResult(exit_code=-1, stdout=_join(stdout), stderr=_join(stderr), timed_out=True,
                                  duration_s=duration)
            if code is None:
                await self._raise_if_gone(None)
                detail = execution.error.value if execution.error else "the stream ended without an exit status"
                # the stream lost its end, the command did not (docs/providers.md): execd still runs
                # it, or ran it to the end. Its output may be cut short too, so only a caller that
                # can do without it gets a result; the others wait for the end only to rerun it
                until = None if lost == "fail" else start + timeout + ops["exec_grace"]
                status, fate = await self._outcome(execution.id, until)
                if status is not None and lost == "rerun" and attempt < retries:
                    trace.event("rerun", attempt=attempt + 1, error=detail + fate)
                    continue
                if status is not None and lost == "wait":
                    trace.event("output_lost", error=detail + fate)
                    took = time.monotonic() - start
                    return ExecResult(exit_code=status, stdout=_join(stdout), stderr=_join(stderr), output_lost=True,
                                      timed_out=status == -1 and took >= timeout * 0.95, duration_s=took)
                raise SandboxError(f"sandbox {self.id}: command did not complete ({detail}{fate})",
                                   FailureClass.SANDBOX_EXEC)
            timed_out = code == -1 and duration >= timeout * 0.95
            if not timed_out and (code == -1 or code in KILLED_EXIT_CODES):
                await self._raise_if_gone(None)  # killed by a signal: maybe the whole sandbox died
            return ExecResult(exit_code=code, stdout=_join(stdout), stderr=_join(stderr), timed_out=timed_out,
                              duration_s=duration)
        raise AssertionError("unreachable")

    async def probe(self) -> None:
        """Run the probe until it prints what is expected; SandboxError at the deadline."""
        cfg = self.provider.options["probe"]
        # the workdir too: every later command runs there, and execd refuses a missing cwd
        command = f"mkdir -p {TMPDIR} {shlex.quote(self.workdir)} && {cfg['command']}"
        expected = cfg.get("expected")
        deadline = time.monotonic() + cfg["timeout"]
        last = "not run"
        # execd usually answers at the first attempt, or within moments of the create: wait
        # PROBE_FIRST_WAIT, doubling up to the configured interval
        wait = min(PROBE_FIRST_WAIT, cfg["interval"])
        while True:
            remaining = deadline - time.monotonic()
            try:
                result = await self._run(command, timeout=max(1.0, remaining), cwd="/",
                                         env=None, retries=0)
                lines = [line.strip() for line in result.stdout.splitlines()]
                if result.ok and (expected is None or str(expected).strip() in lines):
                    return
                last = f"exit {result.exit_code}, stdout {result.stdout[-200:]!r}"
            except SandboxGone:
                raise
            except SandboxError as exc:
                last = str(exc)
            if time.monotonic() + wait >= deadline:
                raise SandboxError(f"sandbox {self.id} failed its probe within {cfg['timeout']}s: {last}",
                                   FailureClass.SANDBOX_PROBE)
            await asyncio.sleep(wait)
            wait = min(wait * 2, cfg["interval"])

    # files -------------------------------------------------------------------------------
    async def upload(self, path: str, data: bytes, mode: int = 0o644) -> None:
        await self._write({path: (data, mode)})

    async def upload_files(self, files: Mapping[str, tuple[bytes, int]]) -> None:
        await self._write(files)

    async def _write(self, files: Mapping[str, tuple[bytes, int]]) -> None:
        """The files in one request to execd."""
        ops = self.provider.ops
        named = ", ".join(files)
        # execd takes the mode as octal digits written as a decimal number
        entries = [WriteEntry(path=p, data=data, mode=int(oct(mode)[2:])) for p, (data, mode) in files.items()]
        for attempt in range(ops["retries"] + 1):
            try:
                await asyncio.wait_for(self.files.write_files(entries), ops["timeout"])
                return
            except (SandboxException, asyncio.TimeoutError) as exc:
                # writing the same bytes twice is harmless, so any transient failure is retried
                status = _status(exc)
                transient = status is None or status >= 500 or status == 429
                if not transient or attempt == ops["retries"]:
                    await self._raise_if_gone(exc)
                    raise SandboxError(f"sandbox {self.id}: cannot write {named} ({_short_message(exc)})",
                                       FailureClass.SANDBOX_FILE) from exc
                await asyncio.sleep(_retry_delay(attempt, ops["backoff_initial"], ops["backoff_max"], exc))

    async def download(self, path: str) -> bytes:
        try:
            return await asyncio.wait_for(self.files.read_bytes(path), self.provider.ops["timeout"])
        except (SandboxException, asyncio.TimeoutError) as exc:
            if _status(exc) == 404:
                raise SandboxError(f"{path}: no such file in sandbox {self.id}", FailureClass.SANDBOX_FILE) from None
            await self._raise_if_gone(exc)
            raise SandboxError(f"sandbox {self.id}: cannot read {path} ({_short_message(exc)})",
                               FailureClass.SANDBOX_FILE) from exc

    async def restrict_network(self, proxy: tuple[str, int] | None) -> str | None:
        """Deny-all but the proxy's host (egress rules have no ports), through the sidecar."""
        rules = [NetworkRule(action="allow", target=proxy[0])] if proxy else []
        await self.provider.set_policy(self.id, NetworkPolicy(default_action="deny", egress=rules))
        return proxy[0] if proxy else None

    # state -------------------------------------------------------------------------------
    async def status(self) -> State:
        info = await self.provider.info(self.id)
        return "gone" if info is None else _STATES.get(info.status.state.lower(), "unknown")

    async def _outcome(self, execution_id: str | None, until: float | None) -> tuple[int | None, str]:
        """(exit status, `; execd reports ...`) of a command whose stream ended without its exit
        status, from execd's own record: asked once (`until` None), or until it reports the command
        finished or the monotonic clock passes `until`. The status is None unless it finished."""
        if not execution_id:
            return None, "; execd never named the command"
        for poll in itertools.count():
            try:
                st = await asyncio.wait_for(self.commands.get_command_status(execution_id),
                                            self.provider.ops["timeout"])
            except (SandboxException, asyncio.TimeoutError) as exc:
                why = _short_message(exc) if isinstance(exc, SandboxException) else "timed out"
                return None, f"; its status could not be read: {why}"
            if not st.running:
                return st.exit_code, (f"; execd reports it finished with exit {st.exit_code}"
                                      f"{f' ({st.error})' if st.error else ''}")
            wait = backoff_delay(poll, OUTCOME_POLL, OUTCOME_POLL_MAX)
            if until is None or time.monotonic() + wait > until:
                return None, "; execd reports it still running"
            await asyncio.sleep(wait)
        raise AssertionError("unreachable")

    async def _raise_if_gone(self, exc: BaseException | None) -> None:
        """SandboxGone when the sandbox is deleted, expired or dead; otherwise return.

        After a failed request the server is asked twice, a second apart: a container
        that dies breaks its streams a moment before the server reports it dead.
        """
        for attempt in range(2 if exc is not None else 1):
            if attempt:
                await asyncio.sleep(1.0)
            try:
                info = await self.provider.info(self.id)
            except SandboxError:
                return  # cannot tell; the caller reports its own error
            if info is None or _STATES.get(info.status.state.lower()) == "gone":
                break
        if info is None:
            raise SandboxGone(f"sandbox {self.id} no longer exists (deleted or expired)") from exc
        state = info.status.state
        if _STATES.get(state.lower()) == "gone":
            why = ": ".join(x for x in (info.status.reason, info.status.message) if x)
            raise SandboxGone(f"sandbox {self.id} is {state}" + (f" ({why})" if why else "")) from exc

    @staticmethod
    async def _quiet(coro) -> None:
        try:
            await coro
        except Exception as exc:  # cleanup of a temporary file must not mask the result
            log.debug("ignored: %s", exc)


def _join(lines: list[str]) -> str:
    return "".join("\n" if line == "\n" else line + "\n" for line in lines)


# --- the provider ----------------------------------------------------------------------------

class OpenSandboxProvider(Provider):
    name = "opensandbox"
    options_model = OpenSandboxOptions
    plumbing = ("connection", "operations", "probe")

    def __init__(self, options: dict[str, Any] | None = None):
        super().__init__(options)
        check_sdk(_installed("opensandbox"))
        # the model fills what the block leaves out (a partial create.resources keeps the default memory)
        self.options = self.options_model.model_validate(self.options).model_dump(mode="json")
        conn = self.options["connection"]
        self.ops = self.options["operations"]
        key_env = conn.get("api_key_env")
        self._api_key = os.environ.get(key_env) if key_env else None
        self._key_env = key_env
        self._connection: ConnectionConfig | None = None
        self._manager: SandboxManager | None = None
        self._transport: httpx.AsyncBaseTransport | None = None
        # the server's egress sidecar restricts what a sandbox reaches (off: nothing is restricted)
        self.isolates_network = bool(self.options["network_policy"])

    @classmethod
    def service(cls, options: dict[str, Any]) -> str | None:
        return (options.get("connection") or {}).get("domain")

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> None:
        """The server's address and key must be there (one line each, before any job)."""
        conn = options.get("connection") or {}
        where = "sandbox.opensandbox.connection"
        errors = Collector()  # the address and the key, both named in one try
        with errors.check():
            if not conn.get("domain"):
                how = (f"export {conn['domain_env']}=host:port (named by {where}.domain_env)" if conn.get("domain_env")
                       else "set it to the OpenSandbox server's host:port")
                raise UserError(f"{where}.domain: the OpenSandbox server's address is not set; {how}")
        with errors.check():
            key_env = conn.get("api_key_env")
            if key_env and not os.environ.get(key_env, "").strip():
                raise UserError(f"{where}.api_key_env: the environment variable {key_env} is not set; export it "
                                f"with the OpenSandbox server's API key, or set {where}.api_key_env: null for a "
                                "server without one")
        errors.raise_any()

    # connection plumbing -------------------------------------------------------------------
    def _config(self) -> ConnectionConfig:
        """The SDK's connection settings, with the one transport every SDK client shares."""
        if self._connection is None:
            conn = self.options["connection"]
            size = max(1, int(conn["max_connections"]))
            inner = httpx.AsyncHTTPTransport(limits=httpx.Limits(
                max_connections=size, max_keepalive_connections=min(size, KEEPALIVE_POOL),
                keepalive_expiry=conn["keep_alive_expiry"]))
            policy = RetryPolicy(
                max_retries=self.ops["retries"],
                initial_backoff=timedelta(seconds=self.ops["backoff_initial"]),
                max_backoff=timedelta(seconds=self.ops["backoff_max"]),
                retryable_status_codes_idempotent=frozenset({429, 500, 502, 503, 504}),
            )
            self._transport = RetryAsyncTransport(inner, policy, owns_inner=True)
            self._connection = ConnectionConfig(
                domain=conn["domain"], protocol=conn["protocol"], api_key=self._api_key,
                request_timeout=timedelta(seconds=conn["request_timeout"]), transport=self._transport,
                use_server_proxy=conn["use_server_proxy"], disable_metrics=True,
            )
        return self._connection

    async def manager(self) -> SandboxManager:
        """The lifecycle client for calls not tied to one sandbox object."""
        if self._manager is None:
            self._manager = await SandboxManager.create(self._config())
        return self._manager

    async def _launch(self, spec: SandboxSpec, request: dict[str, Any]) -> OpenSandboxSandbox:
        """One create call and the endpoint lookups (the SDK deletes a sandbox whose endpoints fail).

        No health check: create() probes the sandbox with a real command.
        """
        sdk = await SdkSandbox.create(
            SandboxImageSpec(image=spec.image), connection_config=self._config(), skip_health_check=True,
            ready_timeout=timedelta(seconds=self.options["create"]["ready_timeout"]),
            health_check_polling_interval=timedelta(milliseconds=200), **request)
        return OpenSandboxSandbox(self, sdk, spec)

    def _api_error(self, what: str, exc: BaseException, failure_class: str = FailureClass.SANDBOX_API) -> SandboxError:
        status = _status(exc)
        if status in (401, 403):
            where = f"${self._key_env}" if self._key_env else "connection.api_key_env"
            return SandboxError(f"{what}: the OpenSandbox server at {self.options['connection']['domain']} refused "
                                f"the API key (HTTP {status}); check {where}", FailureClass.SANDBOX_AUTH)
        return SandboxError(f"{what}: {_short_message(exc)}", failure_class)

    # lifecycle ----------------------------------------------------------------------------
    async def create(self, spec: SandboxSpec) -> OpenSandboxSandbox:
        if not spec.image:
            raise UserError("the opensandbox provider needs an image; set the task's image or an image rewrite")
        cfg = self.options["create"]
        nonce = uuid.uuid4().hex
        metadata = {**metadata_for(spec.labels), CREATE_LABEL: nonce}
        resource = {k: str(v) for k, v in (cfg["resources"] or {}).items()}
        resource.update({k: v for k, v in (("cpu", spec.resources.cpu), ("memory", spec.resources.memory)) if v})
        extensions = {"imagePullPolicy": cfg["image_pull_policy"]} if cfg.get("image_pull_policy") else None
        env = dict(spec.env)
        if cfg.get("execd_grace"):  # execd's stream tail: 1 s of waiting per command by default
            env.setdefault(EXECD_GRACE_ENV, cfg["execd_grace"])
        request = dict(
            timeout=timedelta(seconds=max(60, int(spec.ttl_seconds))),
            env=env, metadata=metadata,
            resource=resource or dict(SDK_DEFAULT_RESOURCE),
            resource_requests=dict(cfg["resource_requests"]) if cfg.get("resource_requests") else None,
            entrypoint=list(spec.entrypoint or SDK_DEFAULT_ENTRYPOINT),
            network_policy=self._policy(spec),
            extensions=extensions or {}, volumes=None,
        )
        attempt_deadline = self.options["connection"]["request_timeout"] * 2 + cfg["ready_timeout"] + 10
        maybe_strays = False
        sandbox = None
        for attempt in range(cfg["retries"] + 1):
            await self.admit()  # every attempt is a create the server sees
            try:
                sandbox = await asyncio.wait_for(self._launch(spec, request), attempt_deadline)
                if self.admission is not None:
                    self.admission.succeeded()
                break
            except (SandboxException, asyncio.TimeoutError) as exc:
                status = _status(exc)
                if status in (429, 503) and self.admission is not None:
                    self.admission.throttled(_retry_after(exc))  # the whole run slows down
                certain = status == 429 or (status is not None and 400 <= status < 500) or _pre_send(exc)
                maybe_strays = maybe_strays or not certain
                retryable = (status is None or status >= 500 or status == 429) and not (
                    isinstance(exc, InvalidArgumentException) and not isinstance(exc.__cause__, ValueError))
                if not retryable or attempt == cfg["retries"]:
                    if maybe_strays:
                        await self._delete_strays(nonce, keep=None)
                    refused = self._network_refused(exc)
                    if refused is not None:
                        raise refused from exc
                    raise self._api_error(f"cannot create a sandbox from {spec.image} "
                                          f"(attempt {attempt + 1} of {cfg['retries'] + 1})", exc,
                                          "sandbox_create") from exc
                if not certain:
                    # the server may have created it anyway: keep at most one per create
                    await self._delete_strays(nonce, keep=None)
                delay = _retry_delay(attempt, cfg["backoff_initial"], cfg["backoff_max"], exc)
                log.warning("create from %s failed (%s); retry in %.1fs", spec.image, _short_message(exc), delay)
                trace.event("retry", attempt=attempt + 1, error=_short_message(exc), status=status, delay_s=delay)
                await asyncio.sleep(delay)
        try:
            if maybe_strays:  # an earlier attempt may have come up late
                await self._delete_strays(nonce, keep=sandbox.id)
            await sandbox.probe()
        except BaseException:
            await asyncio.shield(self._delete_quietly(sandbox.id))
            raise
        return sandbox

    def _policy(self, spec: SandboxSpec) -> NetworkPolicy | None:
        """The egress policy a sandbox starts with: none at all when policies are off; else deny
        or allow everything (an allow-all policy still starts the sidecar restrict_network needs)."""
        if not self.isolates_network:
            return None
        return NetworkPolicy(default_action="allow" if spec.allow_internet else "deny", egress=[])

    def _network_refused(self, exc: BaseException) -> SandboxError | None:
        """The server's refusal of every network policy (no egress sidecar image), said with the way out."""
        if self.isolates_network and _status(exc) == 400 and "egress" in _short_message(exc).lower():
            return SandboxError(
                f"the OpenSandbox server at {self.options['connection']['domain']} cannot restrict a sandbox's "
                f"network ({_short_message(exc)}); configure its egress sidecar ([egress] image in its config), or "
                "set sandbox.opensandbox.network_policy: false to run with the server's network unrestricted "
                "(recorded in every rollout)", FailureClass.SANDBOX_NETWORK)
        return None

    async def set_policy(self, sandbox_id: str, policy: NetworkPolicy) -> None:
        """Replace a sandbox's egress policy (the lifecycle API's PUT; idempotent, so retried)."""
        config = self._config()
        headers = {"OPEN-SANDBOX-API-KEY": self._api_key} if self._api_key else {}
        body = policy.model_dump(by_alias=True, exclude_none=True, mode="json")
        async with httpx.AsyncClient(base_url=config.get_base_url(), headers=headers, transport=self._transport,
                                     timeout=self.options["connection"]["request_timeout"]) as client:
            try:
                resp = await asyncio.wait_for(client.put(f"/sandboxes/{sandbox_id}/networkpolicy", json=body),
                                              self.ops["timeout"])
            except (httpx.HTTPError, asyncio.TimeoutError) as exc:
                raise SandboxError(f"sandbox {sandbox_id}: cannot replace its network policy ({exc!r})",
                                   FailureClass.SANDBOX_NETWORK) from exc
        if resp.status_code >= 300:
            raise SandboxError(f"sandbox {sandbox_id}: the server refused its network policy (HTTP "
                               f"{resp.status_code}: {resp.text[:300]})", FailureClass.SANDBOX_NETWORK)

    async def _delete_strays(self, nonce: str, keep: str | None) -> None:
        try:
            infos = await self.list({CREATE_LABEL: nonce})
        except SandboxError as exc:
            log.warning("cannot list strays of create %s (%s); the reaper will find them by label", nonce, exc)
            return
        for info in infos:
            if info.id != keep:
                await self._delete_quietly(info.id)

    async def _delete_quietly(self, sandbox_id: str) -> None:
        try:
            await self.delete(sandbox_id)
        except SandboxError as exc:
            log.warning("cannot delete sandbox %s (%s); it expires at its TTL", sandbox_id, exc)

    async def connect(self, sandbox_id: str, spec: SandboxSpec) -> OpenSandboxSandbox:
        info = await self.info(sandbox_id)
        if info is None or _STATES.get(info.status.state.lower()) == "gone":
            state = "does not exist" if info is None else f"is {info.status.state}"
            raise SandboxGone(f"sandbox {sandbox_id} {state}")
        try:
            sdk = await SdkSandbox.connect(
                sandbox_id, connection_config=self._config(), skip_health_check=True,
                connect_timeout=timedelta(seconds=self.options["create"]["ready_timeout"]))
        except SandboxException as exc:
            if _status(exc) == 404:
                raise SandboxGone(f"sandbox {sandbox_id} no longer exists") from exc
            raise self._api_error(f"cannot connect to sandbox {sandbox_id}", exc) from exc
        return OpenSandboxSandbox(self, sdk, spec)

    async def info(self, sandbox_id: str):
        """The SDK's SandboxInfo, or None when the server does not know the sandbox."""
        manager = await self.manager()
        try:
            return await asyncio.wait_for(manager.get_sandbox_info(sandbox_id), self.ops["timeout"])
        except (SandboxException, asyncio.TimeoutError) as exc:
            if _status(exc) == 404:
                return None
            raise self._api_error(f"cannot get sandbox {sandbox_id}", exc) from exc

    async def preflight(self, images: list[str]) -> None:
        """The server answers and takes the key: one list call (the images are the server's to pull)."""
        where = "sandbox.opensandbox.connection"
        try:
            await self.list({"run": "sandbatch-preflight"})
        except SandboxError as exc:
            if exc.failure_class == FailureClass.SANDBOX_AUTH:
                raise UserError(f"{exc}; export the server's key in the variable it names",
                                f"{where}.api_key_env") from None
            raise UserError(f"the OpenSandbox server does not answer ({exc}); start it, or fix the address",
                            f"{where}.domain") from None

    async def list(self, labels: dict[str, str]) -> list[SandboxInfo]:
        manager = await self.manager()
        metadata = metadata_for(labels)
        out: list[SandboxInfo] = []
        for page in itertools.count(1):
            try:
                result = await asyncio.wait_for(manager.list_sandbox_infos(SandboxFilter(
                    metadata=metadata or None, page=page, page_size=PAGE_SIZE)), self.ops["timeout"])
            except (SandboxException, asyncio.TimeoutError) as exc:
                raise self._api_error("cannot list sandboxes", exc) from exc
            for item in result.sandbox_infos:
                out.append(SandboxInfo(
                    id=item.id, state=_STATES.get(item.status.state.lower(), "unknown"),
                    labels=dict(item.metadata or {}),
                    expires_at=item.expires_at.isoformat() if item.expires_at else None))
            if not result.pagination.has_next_page:
                return out
        raise AssertionError("unreachable")

    async def delete(self, sandbox_id: str) -> bool:
        manager = await self.manager()
        try:
            await asyncio.wait_for(manager.kill_sandbox(sandbox_id), self.ops["timeout"])
            return True
        except (SandboxException, asyncio.TimeoutError) as exc:
            if _status(exc) == 404:
                return False  # already gone
            raise self._api_error(f"cannot delete sandbox {sandbox_id}", exc) from exc

    async def aclose(self) -> None:
        if self._transport is not None:
            await self._transport.aclose()
        self._transport = None
        self._connection = None
        self._manager = None


__all__ = ["OpenSandboxProvider", "OpenSandboxSandbox", "SDK_VERSIONS", "check_sdk",
           "metadata_for"]
