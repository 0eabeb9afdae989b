"""Step 2: run the agent harness in the rollout's sandbox; write events.jsonl and harness.json."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import Any

from .. import trace
from ..core.errors import InfraError
from ..core.failures import FailureClass
from ..harness import Harness, Outcome, RunContext, get_harness
from ..contracts.records import EVENTS, HARNESS, MODEL_CALLS, SANDBOX, HarnessRecord, SandboxRecord, agent_handle, load
from ..sandbox import Sandbox, SandboxGone
from ..contracts.sandbox import NetworkRecord
from ..core.util import jsonl, write_atomic
from ..tasks.settings import prompt_for
from ..core import killpoint
from ..contracts.model_calls import iter_calls, outage
from .common import Step
from . import network
from .sandbox import create_agent_sandbox, fill


def _count_lines(path) -> int:
    try:
        with open(path, "rb") as fh:
            return sum(1 for _ in fh)
    except OSError:
        return 0


@dataclasses.dataclass
class Endpoint:
    """How the agent reaches its model: through `proxy` (reached at `advertise` until the
    sandbox is restricted), directly at `direct_url` (model.proxy.enabled false), or not at all."""

    proxy: Any = None  # a started proxy.ModelProxy
    advertise: str = ""
    api_key: str | None = None
    on_host: bool = False  # the agent's model client runs on this host, not in the sandbox
    direct_url: str | None = None
    why_none: str = ""  # why the sandbox needs no way to the model


class HarnessStep(Step):
    name = "harness"

    def __init__(self, ctx):
        super().__init__(ctx)
        self.harness: Harness = get_harness(ctx.cfg.harness.name)
        self.replacement: SandboxRecord | None = None
        self.network: NetworkRecord | None = None  # what the agent's sandbox reached (steps/network.py)

    def _record(self, **kw) -> HarnessRecord:
        return HarnessRecord(harness=self.harness.name,
                             version=self.ctx.cfg.harness.version or self.harness.default_version, **kw)

    async def _sandbox(self, handle: SandboxRecord) -> Sandbox:
        """The recorded sandbox if it is alive and unused, else a fresh one, recorded in this
        step's own harness.json (`sandbox`), never in sandbox.json (an upstream output); either
        way marked as used from here on."""
        sandbox = await self.recovery.claim(handle)
        if sandbox is not None:
            return sandbox
        sandbox, base_ref, history = await create_agent_sandbox(self.ctx, handle.spec, self.phases, step=self.name)
        await self.recovery.claim_new(sandbox)
        handle = fill(handle.model_copy(), sandbox, base_ref, history)
        handle.recreated += 1
        self.replacement = handle
        return sandbox

    async def run(self) -> None:
        ctx = self.ctx
        handle = load(SandboxRecord, ctx.path(SANDBOX))
        self.recovery.take_over("sandbox")
        if handle.failed_infra:
            return self._write(Outcome(events=[], exit_code=None, status="infra_error",
                                       failure_class=handle.failure_class), error=f"sandbox: {handle.error}")
        key = self.recovery.key(SANDBOX)
        # an agent run an interrupted attempt finished counts while its sandbox (the patch's source) lives
        if await self.recovery.resume(key, usable=lambda found: self._alive(handle, found)):
            return
        await self.recovery.clear()  # replacements an interrupted attempt used
        write_atomic(ctx.path(MODEL_CALLS), "")  # calls of an earlier attempt do not count
        sandbox = await self._sandbox(handle)
        outcome = await self._run(sandbox)
        # the finished agent run is kept (until the patch step starts): a rerun of this step
        # before Snakemake recorded it finished restores it instead of running the agent again
        self._write(outcome, key=key)

    @killpoint.after("ran")
    async def _run(self, sandbox: Sandbox) -> Outcome:
        """The agent's run in `sandbox`, which is deleted if the run fails or is interrupted."""
        try:
            async with self._model_endpoint() as endpoint:
                outcome = await self._run_agent(sandbox, endpoint)
            self._check_endpoint()  # the proxy is stopped: every call is in model_calls.jsonl
            await sandbox.ensure_alive("the agent run")
        except BaseException:
            # interrupted or failed: nobody else will clean this sandbox up in time
            await asyncio.shield(sandbox.delete())
            raise
        return outcome

    async def _alive(self, handle: SandboxRecord, found: Path) -> bool:
        """Whether the agent's sandbox of the kept run in `found` still runs."""
        agent = agent_handle(handle, load(HarnessRecord, found / HARNESS))
        try:
            sandbox = await self.ctx.provider.connect(agent.sandbox_id, agent.spec)
            await sandbox.ensure_alive("an interrupted harness step")
        except SandboxGone:
            return False
        return True

    @contextlib.asynccontextmanager
    async def _model_endpoint(self):
        """How the agent reaches its model: the rollout's proxy, or the model itself."""
        cfg = self.ctx.cfg
        if not self.harness.needs_model:
            yield Endpoint(why_none=f"harness {self.harness.name} talks to no model")
        elif not cfg.model.proxy.enabled:
            yield Endpoint(direct_url=cfg.model.base_url, api_key=cfg.model.upstream_key())
        else:
            from ..proxy import ModelProxy
            from ..sandbox import proxy_address

            on_host = self.harness.model_on_host(self.harness.options_of(cfg.harness.config))
            if on_host:
                # the agent's client runs here: the proxy needs no address the sandboxes reach
                bind = cfg.model.proxy.bind_host or "127.0.0.1"
                advertise = "127.0.0.1" if bind in ("0.0.0.0", "::") else bind
            else:
                bind, advertise = proxy_address(cfg.sandbox, cfg.model.proxy)
            async with ModelProxy.from_config(cfg.model, self.ctx.path(MODEL_CALLS), bind_host=bind) as proxy:
                yield Endpoint(proxy=proxy, advertise=advertise, api_key=proxy.agent_key, on_host=on_host,
                               why_none="the agent's model client runs on this host" if on_host else "")

    def _check_endpoint(self) -> None:
        """InfraError of the endpoint's failure class when the agent's last model call failed
        for the endpoint's reasons (contracts.model_calls.outage): an outage is never the agent's."""
        found = outage(iter_calls(self.ctx.path(MODEL_CALLS)))
        if found is None:
            return
        failure_class, call, failed, calls = found
        what = call.get("error") or f"HTTP {call.get('status')}"
        raise InfraError(f"model endpoint {self.ctx.cfg.model.base_url}: {failure_class}: {what} "
                         f"({failed} of {calls} model calls failed; the last one did)", failure_class)

    async def _until_down(self, run: "asyncio.Future[Outcome]", proxy) -> Outcome:
        """The agent's outcome, or the agent stopped as soon as the proxy finds the endpoint
        down (model.proxy.stop_after_failures calls in a row): waiting out the agent's
        timeout against a dead endpoint only delays the retry."""
        agent = asyncio.ensure_future(run)
        if proxy is None:
            return await agent
        down = asyncio.ensure_future(proxy.down().wait())
        try:
            await asyncio.wait({agent, down}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            down.cancel()
            if not agent.done():
                agent.cancel()
                await asyncio.wait({agent})  # its own clean-up (the agent's process, its thread)
        if not agent.cancelled():
            return agent.result()
        self._log(f"agent stopped: the model endpoint failed {proxy.settings.stop_after_failures} calls in a row "
                  f"({proxy.outage})")
        self._check_endpoint()
        raise InfraError(f"model endpoint {self.ctx.cfg.model.base_url}: {proxy.outage}",
                         proxy.outage or FailureClass.MODEL)

    async def _restrict(self, sandbox: Sandbox, endpoint: "Endpoint") -> tuple[str | None, NetworkRecord]:
        """The agent's network from now on (steps/network.py), and its model URL on it."""
        task = self.ctx.task
        if endpoint.direct_url is not None:
            return endpoint.direct_url, network.unrestricted(
                sandbox.provider, "model.proxy.enabled is false: the agent calls the model endpoint directly")
        if endpoint.proxy is None or endpoint.on_host:
            record = await network.restrict_agent(sandbox, task, None, endpoint.why_none)
            return (endpoint.proxy.url_for(endpoint.advertise) if endpoint.proxy else None), record
        record = await network.restrict_agent(sandbox, task, (endpoint.advertise, endpoint.proxy.port), "")
        host = record.model_address.rsplit(":", 1)[0] if record.model_address else endpoint.advertise
        return endpoint.proxy.url_for(host), record

    async def _run_agent(self, sandbox: Sandbox, endpoint: "Endpoint") -> Outcome:
        ctx, cfg = self.ctx, self.ctx.cfg
        run_ctx = RunContext(
            task=ctx.task, prompt=prompt_for(ctx.task, cfg.benchmark),
            options=self.harness.options_of(cfg.harness.config), version=cfg.harness.version,
            model=cfg.model, model_url=None, api_key=endpoint.api_key, timeouts=ctx.timeouts, rollout_dir=ctx.dir)
        t0 = time.monotonic()
        try:
            async with self._progress("install"):
                await asyncio.wait_for(self.harness.install(sandbox, run_ctx), ctx.scaled(cfg.timeouts.install))
        except asyncio.TimeoutError:
            raise InfraError(f"installing {self.harness.name} took longer than "
                             f"{ctx.scaled(cfg.timeouts.install):.0f} s", FailureClass.HARNESS_INSTALL) from None
        install_s = time.monotonic() - t0
        # the install had the engine's network (a registry); the agent gets its model only
        run_ctx.model_url, self.network = await self._restrict(sandbox, endpoint)
        self._log(f"network: {self.network.policy} ({self.network.reason})"
                  + ("" if self.network.enforced else ", NOT enforced"))
        async with self._progress("agent"):
            outcome = await self._until_down(self.harness.run(sandbox, run_ctx), endpoint.proxy)
        outcome.install_s = install_s
        self._log(f"agent finished: {outcome.status} (exit {outcome.exit_code}), {len(outcome.events)} events")
        return outcome

    def _log(self, message: str) -> None:
        """A progress line in the step's log (results/<run>/<task>/<repeat>/logs/harness.log)."""
        stamp = time.strftime("%H:%M:%S")
        print(f"[{stamp}] {self.harness.name} {self.ctx.task_id}/{self.ctx.repeat}: {message}",
              file=sys.stderr, flush=True)

    @contextlib.asynccontextmanager
    async def _progress(self, phase: str):
        """Log the start of a long phase, then a line every `every` seconds until it ends."""
        t0 = time.monotonic()
        every = float(os.environ.get("SANDBATCH_PROGRESS_EVERY", "60"))  # read per step: the step server forks
        self._log(f"{phase} started")

        async def beat() -> None:
            while True:
                await asyncio.sleep(every)
                calls = _count_lines(self.ctx.path(MODEL_CALLS))
                self._log(f"{phase} running for {time.monotonic() - t0:.0f} s, {calls} model calls so far")

        ticker = asyncio.ensure_future(beat())
        try:
            with trace.span(f"harness.{phase}", **{"sandbatch.harness": self.harness.name}):
                yield
        finally:
            ticker.cancel()
        self._log(f"{phase} done in {time.monotonic() - t0:.1f} s")

    def _write(self, outcome: Outcome, error: str | None = None, key: dict | None = None) -> None:
        """The outputs; with `key` (the inputs' identity) by way of a capture (steps.recovery)."""
        rec = self.stamp(self._record(status=outcome.status, failure_class=outcome.failure_class, error=error,
                                      exit_code=outcome.exit_code, timed_out=outcome.timed_out,
                                      stderr_tail=outcome.stderr_tail, install_s=round(outcome.install_s, 3),
                                      agent_s=round(outcome.agent_s, 3), events=len(outcome.events),
                                      metadata=outcome.metadata, sandbox=self.replacement,
                                      network=self.network))
        # model_calls.jsonl: written by the model proxy as the agent ran (empty if it never ran)
        self.recovery.write({EVENTS: jsonl(outcome.events), MODEL_CALLS: None}, HARNESS, rec, key)

    def fail(self, exc: InfraError) -> None:
        self._write(Outcome(events=[], exit_code=None, status="infra_error", failure_class=exc.failure_class),
                    error=str(exc))
