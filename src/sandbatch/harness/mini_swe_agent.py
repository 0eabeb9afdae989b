"""`mini-swe-agent` (v2, PyPI `mini-swe-agent`): one bash tool, commands run in the repo.

Two modes (`harness.config.mode`):
- `host` (default, as the reference integration runs it): mini's agent loop runs in the
  harness step on this host (the package is a dependency of sandbatch) and each command
  goes through the sandbox API (`mini_env.SandboxEnvironment`); the model is reached
  through the rollout's proxy on this host. Task images need no Python, sandboxes no
  package index and no route to the model.
- `sandbox`: mini is installed into a venv under the sandbox's tmpdir (uv, bootstrapped
  with pip, by default) and runs there as `mini` with its `local` environment; the image
  needs a Python that can host mini and a package index (or uploaded wheels).
Either way it runs against the run's model through litellm (`openai/<model>`), saves its
trajectory (`.traj.json`; in host mode once at the end, not after every step as `mini`
does), and the trajectory's messages are the events. In host mode the step server has mini
and litellm imported once per run (`host_modules`), so a rollout does not pay ~2 CPU-s
importing them.
The key never lands in the saved config (OPENAI_API_KEY in the sandbox, a call argument
on the host).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import shlex
import threading
import traceback
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field

from ..rollout import responses
from ..core.errors import InfraError, UserError
from ..core.failures import FailureClass
from ..core.util import unawaited
from ..contracts.records import Status
from ..sandbox import Sandbox
from ._process import AgentRun, install_options, run_command, sh, str_env, upload_source
from .mini_defaults import BASE_CONFIG
from .base import (Conversion, Harness, InstallOptions, Options, Outcome, RunContext, keep_unknown, model_endpoint,
                   native_config, tail)

INSTALL_METHODS = ("pip", "upload", "path")
MODES = ("host", "sandbox")
HOST_TRAJECTORY = "mini.traj.json"  # host mode: saved in the rollout directory when the agent ends

# exit_status -> (status, failure class); any other value is the name of an exception
EXIT_STATUS: dict[str, tuple[Status, FailureClass | None]] = {
    "Submitted": ("ok", None),
    "LimitsExceeded": ("agent_error", FailureClass.STEP_LIMIT),
    "TimeExceeded": ("timeout", FailureClass.AGENT_TIME_LIMIT),
    "RepeatedFormatError": ("agent_error", FailureClass.FORMAT_ERROR),
}


class MiniInstall(InstallOptions):
    """Sandbox mode only."""

    method: str = Field("pip", description=(
        "pip (a venv under the sandbox's tmpdir; needs python3 and a package index) | upload | path."))
    package: str = Field("mini-swe-agent", description="The package installed.")
    installer: str = Field("uv", description="uv (pip-installed into the venv first) | pip.")
    uv_version: str = Field("0.13.9", description="The uv installed when installer is uv.")
    python: str = Field("python3", description="The interpreter that makes the venv.")
    source: str | None = Field(None, description=(
        "upload: a directory of wheels (pip download mini-swe-agent==V uv==V -d DIR)."))
    path: str | None = Field(None, description="path: the `mini` executable inside the image.")
    env: dict[str, Any] = Field(default_factory=dict, description=(
        "Extra environment of the install (UV_CACHE_DIR, PIP_INDEX_URL, ...)."))


class MiniOptions(Options):
    mode: str = Field("host", description=(
        "host: the agent loop runs in the harness step on this host, its commands through the sandbox "
        "API; sandbox: mini is installed in the sandbox and runs there."))
    install: MiniInstall = Field(default_factory=MiniInstall, description="How mini gets into the sandbox.")
    config_file: str = Field(BASE_CONFIG, description=(
        "mini's base config: a built-in name or a path (host mode: on this host; sandbox mode: in it)."))
    step_limit: int = Field(250, description="Most agent steps (model calls).")
    cost_limit: float = Field(0, description="Most cost in dollars; 0 = none (unknown for most self-hosted models).")
    wall_time_limit_seconds: float | None = Field(None, description=(
        "mini's own time limit; null: 95 % of timeouts.agent, so mini stops and saves itself."))
    command_timeout: float = Field(120, description="Seconds per bash command.")
    mini_config: dict[str, Any] = Field(default_factory=dict, description=(
        "mini's own config, deep-merged over the generated one (agent, model, environment)."))
    env: dict[str, Any] = Field(default_factory=dict, description=(
        "host mode: the commands' environment; sandbox mode: mini's."))
    extra_args: list[Any] = Field(default_factory=list, description="Sandbox mode: more `mini` arguments.")


class MiniSweAgentHarness(Harness):
    name = "mini-swe-agent"
    default_version = "2.4.6"
    options = MiniOptions

    def check_config(self, opts: MiniOptions) -> None:
        super().check_config(opts)
        if opts.mode not in MODES:
            raise UserError(f"harness.config.mode: {opts.mode!r} is not a mini-swe-agent mode; "
                            f"choose one of: {', '.join(MODES)}")
        if opts.mode == "sandbox":
            install_options(self.name, opts.install, INSTALL_METHODS)

    def model_on_host(self, opts: MiniOptions) -> bool:
        return opts.mode == "host"

    def host_modules(self, opts: MiniOptions) -> tuple[str, ...]:
        return ("sandbatch.harness.mini_env:warm_up",) if opts.mode == "host" else ()

    def _home(self, sandbox: Sandbox) -> str:
        return f"{sandbox.tmpdir}/mini-swe-agent"

    def _binary(self, sandbox: Sandbox, install: MiniInstall) -> str:
        return install.path if install.method == "path" else f"{self._home(sandbox)}/venv/bin/mini"

    async def install(self, sandbox: Sandbox, ctx: RunContext) -> None:
        self.check_config(ctx.options)
        if ctx.options.mode == "host":  # mini runs here; the sandbox only needs bash, and a HOME
            await sh(sandbox, f"mkdir -p {shlex.quote(self.state_env(sandbox)['HOME'])}", timeout=60,
                     what="making the commands' HOME")
            return
        install, home, q = ctx.options.install, self._home(sandbox), shlex.quote
        timeout = ctx.timeouts.install
        if install.method in ("pip", "upload"):
            py = await sandbox.exec(f"command -v {q(install.python)}", timeout=60, lost="rerun")
            if not py.ok:
                raise InfraError(f"installing mini-swe-agent in the sandbox needs {install.python}, which the "
                                 f"image lacks; set harness.config.mode: host to run mini-swe-agent on this "
                                 f"host with its commands in the sandbox", FailureClass.HARNESS_INSTALL)
            index = ""
            if install.method == "upload":
                wheels = await upload_source(sandbox, install.source, f"{home}/wheels", timeout)
                index = f"--no-index --find-links {q(wheels)} "
            spec = f"{install.package}=={self.version(ctx)}"
            env = {**self.state_env(sandbox), "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_ROOT_USER_ACTION": "ignore"}
            try:
                await sh(sandbox, "set -e\n" + _install_script(install, home, spec, index), timeout=timeout,
                         what=f"installing {spec}", env={**env, **str_env(install.env)})
            except InfraError as exc:  # one line: the output's last line, and the way out
                last = (str(exc).strip().splitlines() or [""])[-1]
                raise InfraError(f"installing {spec} in the sandbox failed: {last[-300:]}; set "
                                 f"harness.config.mode: host to run mini-swe-agent on this host",
                                 FailureClass.HARNESS_INSTALL) from None
        await sh(sandbox, f"test -x {q(self._binary(sandbox, install))}", timeout=60,
                 what="finding the mini executable")

    def mini_config(self, sandbox: Sandbox, ctx: RunContext) -> dict[str, Any]:
        opts = ctx.options
        wall = opts.wall_time_limit_seconds
        generated = {
            "agent": {"mode": "yolo", "confirm_exit": False, "step_limit": int(opts.step_limit),
                      "cost_limit": float(opts.cost_limit),
                      "wall_time_limit_seconds": int(wall if wall is not None else 0.95 * ctx.timeouts.agent)},
            "environment": {"environment_class": "local" if opts.mode == "sandbox" else _ENV_CLASS,
                            "cwd": sandbox.workdir, "timeout": int(opts.command_timeout)},
            "model": {"model_name": f"openai/{ctx.model.name}", "cost_tracking": "ignore_errors",
                      "model_kwargs": {"api_base": model_endpoint(ctx, self.name)}},
            "run": {"task": ctx.prompt},
        }
        return native_config(generated, opts.mini_config)

    async def run(self, sandbox: Sandbox, ctx: RunContext) -> Outcome:
        opts = ctx.options
        if opts.mode == "host":
            return await self._run_on_host(sandbox, ctx)
        home = self._home(sandbox)
        run_yaml, traj = f"{home}/run.yaml", f"{home}/out.traj.json"
        await sandbox.upload(run_yaml, yaml.safe_dump(self.mini_config(sandbox, ctx), sort_keys=False).encode())
        argv = [self._binary(sandbox, opts.install), "-c", str(opts.config_file), "-c", run_yaml,
                "--yolo", "--exit-immediately", "-o", traj, *map(str, opts.extra_args)]
        env = {**self.state_env(sandbox), "MSWEA_CONFIGURED": "1", "MSWEA_COST_TRACKING": "ignore_errors",
               "LITELLM_LOCAL_MODEL_COST_MAP": "True", "MSWEA_SILENT_STARTUP": "1",
               "MSWEA_GLOBAL_CONFIG_DIR": f"{home}/global", "OPENAI_API_KEY": ctx.api_key or "unused",
               **str_env(opts.env)}
        run = await run_command(sandbox, argv, timeout=ctx.timeouts.agent, env=env)
        return self._outcome(run, await _trajectory(sandbox, traj))

    def _outcome(self, run: AgentRun, data: dict[str, Any]) -> Outcome:
        """Status from the trajectory's exit status (exit code and timeout otherwise)."""
        info = data.get("info") if isinstance(data.get("info"), dict) else {}
        outcome = self.outcome(run, list(data.get("messages") or []),
                               **{k: info[k] for k in ("exit_status", "submission", "model_stats", "mini_version")
                                  if k in info})
        exit_status = info.get("exit_status")
        if not run.timed_out and exit_status:
            outcome.status, outcome.failure_class = EXIT_STATUS.get(exit_status,
                                                                    ("agent_error", FailureClass.AGENT_EXCEPTION))
        elif not run.timed_out and outcome.status == "ok":  # exited 0 without a trajectory
            outcome.status, outcome.failure_class = "agent_error", FailureClass.NO_TRAJECTORY
        return outcome

    async def _run_on_host(self, sandbox: Sandbox, ctx: RunContext) -> Outcome:
        """mini's agent loop on a worker thread here; its commands run in the sandbox."""
        from .mini_env import Stopped, host_agent, sandbox_uname

        loop = asyncio.get_running_loop()
        agent, env = host_agent(self.mini_config(sandbox, ctx), str(ctx.options.config_file), ctx.api_key,
                                sandbox, loop, uname=await sandbox_uname(sandbox),
                                base_env={**self.state_env(sandbox), **str_env(ctx.options.env)})
        traj = ctx.rollout_dir / HOST_TRAJECTORY
        traj.unlink(missing_ok=True)  # an earlier attempt's
        t0 = loop.time()
        done = _in_thread(agent.run, ctx.prompt)
        timed_out, error = False, None
        try:
            await asyncio.wait_for(asyncio.shield(done), ctx.timeouts.agent)
        except asyncio.TimeoutError:
            timed_out = True  # mini's own wall-time limit (95 %) did not stop it in time
        except InfraError:
            raise  # the sandbox failed under a command: an infrastructure failure, not the agent's
        except Exception as exc:  # the agent raised (mini recorded it as the exit status)
            error = exc
        finally:
            env.stop.set()  # a still-running loop stops at its next command
            # saved once, whatever the end (also when the step is cancelled); mini itself
            # would re-encode the whole history after every step
            agent.save(traj)
        if isinstance(error, Stopped):
            error = None
        stderr = "".join(traceback.format_exception(error)) if error else ""
        if timed_out:
            stderr += f"the agent was stopped at its {ctx.timeouts.agent:.0f} s timeout"
        run = AgentRun(exit_code=None if timed_out else (1 if error else 0), stdout="", stderr=tail(stderr),
                       timed_out=timed_out, duration_s=loop.time() - t0)
        return self._outcome(run, _read_json(traj))

    def convert(self, events, opts) -> Conversion:
        conv = Conversion(items=[])
        for msg in events:
            role = msg.get("role") if isinstance(msg, dict) else None
            extra = msg.get("extra") if isinstance(msg, dict) and isinstance(msg.get("extra"), dict) else {}
            if role == "assistant":
                conv.items.extend(_assistant_items(msg))
            elif role == "tool":
                conv.items.append(responses.function_call_output(str(msg.get("tool_call_id", "")),
                                                                 _text(msg.get("content"))))
            elif role == "system":
                conv.instructions = _text(msg.get("content"))
            elif role == "user" and conv.input is None and not conv.items:
                conv.input = [responses.user_message(_text(msg.get("content")))]  # the rendered task prompt
            elif role == "user":
                if isinstance(extra.get("response"), dict):
                    # a reply mini rejected (no or a bad tool call) lives only in the feedback's extra
                    choices = extra["response"].get("choices") or [{}]
                    conv.items.extend(_assistant_items(choices[0].get("message") or {}))
                conv.add_feedback(_text(msg.get("content")))  # mini's own message to the model
            elif role == "exit":
                conv.metadata["exit_status"] = extra.get("exit_status")
                # the submit command (or one interrupted by the exit) has no tool message: the
                # exit message (the submission) is its output, so every call has one
                answered = {i["call_id"] for i in conv.items if i["type"] == "function_call_output"}
                for call in [i for i in conv.items if i["type"] == "function_call" and i["call_id"] not in answered]:
                    conv.items.append(responses.function_call_output(call["call_id"], _text(msg.get("content"))))
            else:
                keep_unknown(conv, msg)
        return conv


_ENV_CLASS = "sandbatch.harness.mini_env.SandboxEnvironment"


def _in_thread(fn, *args) -> asyncio.Future:
    """fn(*args) on a daemon thread (one stuck in a model call cannot hold the process open)."""
    loop = asyncio.get_running_loop()
    done = unawaited(loop.create_future())  # a step stopped at its timeout awaits it no more

    def settle(result=None, exc=None) -> None:
        if not done.done():
            done.set_exception(exc) if exc is not None else done.set_result(result)

    def work() -> None:
        try:
            outcome = (fn(*args), None)
        except BaseException as exc:  # noqa: BLE001 (handed to the awaiting step)
            outcome = (None, exc)
        with contextlib.suppress(RuntimeError):  # the step already ended (stopped at its timeout)
            loop.call_soon_threadsafe(settle, *outcome)

    # in the step's context (its trace span): the commands it sends back to the loop carry it
    threading.Thread(target=contextvars.copy_context().run, args=(work,), name="mini-swe-agent", daemon=True).start()
    return done


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _install_script(install: MiniInstall, home: str, spec: str, index: str) -> str:
    """Shell lines that make {home}/venv holding `spec`."""
    q, py, venv = shlex.quote, shlex.quote(install.python), shlex.quote(f"{home}/venv")
    if install.installer != "uv":
        return f"{py} -m venv {venv}\n{venv}/bin/python -m pip install -q {index}{q(spec)}"
    get_uv = f"-m pip install -q --target {q(home)}/uv {index}{q('uv==' + str(install.uv_version))}"
    return "\n".join([
        'UV="$(command -v uv || true)"',
        # no uv in the sandbox: pip-install one beside the venv (from a venv of its own if the
        # interpreter has no pip); uv then makes the venv and installs in seconds, pip in minutes
        'if [ -z "$UV" ]; then',
        f"  {py} {get_uv} || {{ {py} -m venv {q(home)}/uv-venv && {q(home)}/uv-venv/bin/python {get_uv}; }}",
        f"  UV={q(home)}/uv/bin/uv",
        "fi",
        f'"$UV" venv -q --python {py} {venv}',
        f'"$UV" pip install -q --python {venv}/bin/python {index}{q(spec)}',
    ])


def _assistant_items(msg: dict[str, Any]) -> list[dict[str, Any]]:
    items = []
    if isinstance(msg.get("reasoning_content"), str) and msg["reasoning_content"].strip():
        items.append(responses.reasoning(msg["reasoning_content"]))
    text = _text(msg.get("content"))
    if text.strip():
        items.append(responses.message(text))
    for call in msg.get("tool_calls") or []:
        fn = call.get("function") or {}
        items.append(responses.function_call(str(call.get("id", "")), str(fn.get("name", "")),
                                             fn.get("arguments") or "{}"))
    return items


def _text(content: Any) -> str:
    """Message content as text: a string, or the text parts of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return "" if content is None else json.dumps(content, ensure_ascii=False)


async def _trajectory(sandbox: Sandbox, path: str) -> dict[str, Any]:
    """The trajectory mini saved in the sandbox ({} when there is none)."""
    try:
        data = json.loads(await sandbox.download(path))
    except (InfraError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
