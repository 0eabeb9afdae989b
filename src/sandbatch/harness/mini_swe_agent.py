"""`mini-swe-agent` (v2, PyPI `mini-swe-agent`): one bash tool, a local environment in the repo.

It is installed into a venv under the sandbox's tmpdir (uv, bootstrapped with pip, is
the default installer: a cold install takes seconds instead of minutes), runs as `mini`
in yolo mode against the run's model through litellm (`openai/<model>`), and saves its
trajectory (`.traj.json`) after every step; the trajectory's messages are the events.
The key goes in through OPENAI_API_KEY, so it never lands in the saved config.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

import yaml

from .. import responses
from ..errors import InfraError
from ..records import Status
from ..sandbox import Sandbox
from ..util import deep_merge
from ._process import install_options, run_command, sh, str_env, upload_source
from .base import Conversion, Harness, Outcome, RunContext, keep_unknown, model_endpoint

INSTALL_METHODS = ("pip", "upload", "path")

# exit_status -> (status, failure class); any other value is the name of an exception
EXIT_STATUS: dict[str, tuple[Status, str | None]] = {
    "Submitted": ("ok", None),
    "LimitsExceeded": ("agent_error", "step_limit"),
    "TimeExceeded": ("timeout", "agent_time_limit"),
    "RepeatedFormatError": ("agent_error", "format_error"),
}


class MiniSweAgentHarness(Harness):
    name = "mini-swe-agent"
    default_version = "2.4.6"
    default_config = {
        "install": {
            "method": "pip",  # pip (venv under tmpdir; needs python3 + a package index) | upload | path
            "package": "mini-swe-agent",
            "installer": "uv",  # uv (pip-installed into the venv first) | pip
            "uv_version": "0.13.9",
            "python": "python3",  # interpreter that makes the venv
            "source": None,  # upload: a directory of wheels (pip download mini-swe-agent==V uv==V -d DIR)
            "path": None,  # path: the `mini` executable inside the image
            "env": {},  # extra environment of the install (UV_CACHE_DIR, PIP_INDEX_URL, ...)
        },
        "config_file": "mini.yaml",  # mini's base config: a built-in name or a path in the sandbox
        "step_limit": 250,
        "cost_limit": 0,  # 0 = none (cost is unknown for most self-hosted models)
        "wall_time_limit_seconds": None,  # null: 95 % of timeouts.agent, so mini stops and saves itself
        "command_timeout": 120,  # seconds per bash command
        "mini_config": {},  # deep-merged over the generated mini config (agent/model/environment)
        "env": {},
        "extra_args": [],
        "inline_think": False,
    }

    def check_config(self, config: dict[str, Any]) -> None:
        super().check_config(config)
        install_options(self.name, config, INSTALL_METHODS)

    def _home(self, sandbox: Sandbox) -> str:
        return f"{sandbox.tmpdir}/mini-swe-agent"

    def _binary(self, sandbox: Sandbox, config: dict[str, Any]) -> str:
        opts = config["install"]
        return opts["path"] if opts["method"] == "path" else f"{self._home(sandbox)}/venv/bin/mini"

    async def install(self, sandbox: Sandbox, ctx: RunContext) -> None:
        self.check_config(ctx.config)
        opts, home, q = ctx.config["install"], self._home(sandbox), shlex.quote
        timeout = ctx.timeouts.install
        if opts["method"] in ("pip", "upload"):
            index = ""
            if opts["method"] == "upload":
                wheels = await upload_source(sandbox, opts["source"], f"{home}/wheels", timeout)
                index = f"--no-index --find-links {q(wheels)} "
            spec = f"{opts['package']}=={self.version(ctx)}"
            env = {**self.state_env(sandbox), "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_ROOT_USER_ACTION": "ignore"}
            await sh(sandbox, "set -e\n" + _install_script(opts, home, spec, index), timeout=timeout,
                     what=f"installing {spec}", env={**env, **str_env(opts["env"])})
        await sh(sandbox, f"test -x {q(self._binary(sandbox, ctx.config))}", timeout=60,
                 what="finding the mini executable")

    def mini_config(self, sandbox: Sandbox, ctx: RunContext) -> dict[str, Any]:
        cfg = ctx.config
        wall = cfg["wall_time_limit_seconds"]
        generated = {
            "agent": {"mode": "yolo", "confirm_exit": False, "step_limit": int(cfg["step_limit"]),
                      "cost_limit": float(cfg["cost_limit"]),
                      "wall_time_limit_seconds": int(wall if wall is not None else 0.95 * ctx.timeouts.agent)},
            "environment": {"environment_class": "local", "cwd": sandbox.workdir,
                            "timeout": int(cfg["command_timeout"])},
            "model": {"model_name": f"openai/{ctx.model.name}",
                      "model_kwargs": {"api_base": model_endpoint(ctx, self.name)}},
            "run": {"task": ctx.prompt},
        }
        return deep_merge(generated, cfg["mini_config"])

    async def run(self, sandbox: Sandbox, ctx: RunContext) -> Outcome:
        home = self._home(sandbox)
        run_yaml, traj = f"{home}/run.yaml", f"{home}/out.traj.json"
        await sandbox.upload(run_yaml, yaml.safe_dump(self.mini_config(sandbox, ctx), sort_keys=False).encode())
        argv = [self._binary(sandbox, ctx.config), "-c", str(ctx.config["config_file"]), "-c", run_yaml,
                "--yolo", "--exit-immediately", "-o", traj, *map(str, ctx.config["extra_args"])]
        env = {**self.state_env(sandbox), "MSWEA_CONFIGURED": "1", "MSWEA_COST_TRACKING": "ignore_errors",
               "LITELLM_LOCAL_MODEL_COST_MAP": "True", "MSWEA_SILENT_STARTUP": "1",
               "MSWEA_GLOBAL_CONFIG_DIR": f"{home}/global", "OPENAI_API_KEY": ctx.api_key or "unused",
               **str_env(ctx.config["env"])}
        run = await run_command(sandbox, argv, timeout=ctx.timeouts.agent, env=env)
        data = await _trajectory(sandbox, traj)
        info = data.get("info") if isinstance(data.get("info"), dict) else {}
        outcome = self.outcome(run, list(data.get("messages") or []),
                               **{k: info[k] for k in ("exit_status", "submission", "model_stats", "mini_version")
                                  if k in info})
        exit_status = info.get("exit_status")
        if not run.timed_out and exit_status:
            outcome.status, outcome.failure_class = EXIT_STATUS.get(exit_status, ("agent_error", "agent_exception"))
        elif not run.timed_out and outcome.status == "ok":  # exited 0 without a trajectory
            outcome.status, outcome.failure_class = "agent_error", "no_trajectory"
        return outcome

    def convert(self, events, config) -> Conversion:
        conv = Conversion(items=[])
        for msg in events:
            role = msg.get("role") if isinstance(msg, dict) else None
            extra = msg.get("extra") if isinstance(msg, dict) and isinstance(msg.get("extra"), dict) else {}
            if role == "assistant":
                conv.items.extend(_assistant_items(msg))
            elif role == "tool":
                conv.items.append(responses.function_call_output(str(msg.get("tool_call_id", "")),
                                                                 _text(msg.get("content"))))
            elif role == "user" and isinstance(extra.get("response"), dict):
                # a reply mini rejected (no or a bad tool call) lives only in the feedback's extra
                choices = extra["response"].get("choices") or [{}]
                conv.items.extend(_assistant_items(choices[0].get("message") or {}))
            elif role == "exit":
                conv.metadata["exit_status"] = extra.get("exit_status")
            elif role not in ("system", "user"):
                keep_unknown(conv, msg)
        return conv


def _install_script(opts: dict[str, Any], home: str, spec: str, index: str) -> str:
    """Shell lines that make {home}/venv holding `spec`."""
    q, py, venv = shlex.quote, shlex.quote(opts["python"]), shlex.quote(f"{home}/venv")
    if opts["installer"] != "uv":
        return f"{py} -m venv {venv}\n{venv}/bin/python -m pip install -q {index}{q(spec)}"
    get_uv = f"-m pip install -q --target {q(home)}/uv {index}{q('uv==' + str(opts['uv_version']))}"
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
    try:
        data = json.loads(await sandbox.download(path))
    except (InfraError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
