"""The docker provider: creates, finds and deletes the containers that are its sandboxes."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Literal

from docker.types import Mount
from pydantic import Field

from ...core.errors import InfraError, UserError
from ...core.failures import FailureClass
from ..base import CA_ENV, ImageUnavailable, Provider, ProviderOptions, SandboxError, SandboxInfo, SandboxSpec
from . import images, network
from .engine import Engine, EngineError, NotFound
from .sandbox import TMPDIR, DockerSandbox, archive
from .state import STATES, container_state, cpu_count, memory_bytes, sandbox_path, tail

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
    "pids_limit": 4096,
    "gate_image": None,
}


class DockerOptions(ProviderOptions):
    """Options of the docker provider (one container per sandbox on a local Docker engine, spoken
    to through its API over the engine's socket)."""

    docker: str = Field('docker', description=(
        "Not used by the provider since it speaks to the engine's API (kept so that existing configs stay"
        ' valid).'))
    host: str | None = Field(None, description=(
        'Engine address, as DOCKER_HOST takes it (null = $DOCKER_HOST, else unix:///var/run/docker.sock).'))
    label_prefix: str = Field('sandbatch.', description=(
        'Prefix of every container label the provider sets (sandbatch.run, sandbatch.expires-at, ...).'))
    network: str = Field('bridge', description=(
        'Docker network of sandboxes that may reach the internet; the others get network "none".'))
    init: bool = Field(True, description=(
        'Run an init process (as docker run --init does) that reaps orphaned processes of killed '
        'commands.'))
    pull: Literal['missing', 'never', 'always'] = Field('missing', description=(
        'When a create pulls the image (never = only images already on the engine).'))
    mount_ca_bundle: bool = Field(False, description=(
        "Mount the host's CA bundle read-only into every sandbox and point SSL_CERT_FILE, PIP_CERT, ... "
        'at it (needed behind a TLS-intercepting proxy).'))
    ca_bundle: str = Field('/etc/ssl/certs/ca-certificates.crt', description=(
        'The host file mounted when mount_ca_bundle is true.'))
    ca_bundle_target: str = Field('/etc/ssl/certs/ca-certificates.crt', description=(
        "Where the CA bundle appears inside the sandbox (replaces the image's bundle there)."))
    api_timeout: float = Field(120, gt=0, description=(
        'Seconds one engine call (inspect, copy, remove, ...) may take before it counts as an infra '
        'failure.'))
    create_timeout: float = Field(600, gt=0, description='Seconds an image pull or commit may take.')
    pids_limit: int = Field(4096, ge=0, description=(
        'Processes and threads one sandbox may hold at once (0 = no limit), so that a fork bomb in one '
        'sandbox cannot exhaust the host that runs the others.'))
    gate_image: str | None = Field(None, description=(
        "Image of the gate that forwards an agent's sandbox, cut off from every network after the "
        "harness's install, to its model proxy (it runs the image's python3). null = the sandbox's own "
        'image, which the engine already holds.'))


class DockerProvider(Provider):
    name = "docker"
    options_model = DockerOptions
    proxy_hosts = ("0.0.0.0", network.MODEL_HOST)  # containers reach this host through the host gateway
    plumbing = ("docker", "host", "label_prefix", "api_timeout", "create_timeout", "pull")

    def __init__(self, options: dict[str, Any] | None = None):
        super().__init__({**DEFAULTS, **(options or {})})
        o = self.options
        self.prefix = str(o["label_prefix"])
        self.api_timeout = float(o["api_timeout"])
        self.create_timeout = float(o["create_timeout"])
        if o["pull"] not in ("missing", "never", "always"):
            raise UserError(f"sandbox.docker.pull: {o['pull']!r} is not allowed; choose one of: missing, never, always")
        self.engine = Engine(o, self.api_timeout)
        # pulls and commits may take long: their own client, with the create timeout
        self.slow_engine = Engine(o, self.create_timeout)

    async def preflight(self, wanted: list[str]) -> None:
        try:
            await self.engine.call("ping")
        except SandboxError as exc:
            raise UserError(f"{exc}; or set sandbox.docker.host (DOCKER_HOST) to the engine's address",
                            "sandbox.docker.host") from None
        missing = await images.unavailable(self.engine, wanted, self.options["pull"])
        if missing is not None:
            image, why = missing
            fix = ("docker pull it first, or set sandbox.docker.pull: missing" if self.options["pull"] == "never"
                   else "fix the task's image, sandbox.image_rewrites or sandbox.default_image, or log in to "
                        "the registry (docker login)")
            raise ImageUnavailable(f"image {image} {why}; {fix}", image,
                                   "sandbox.docker.pull" if self.options["pull"] == "never" else None)

    async def inspect(self, name: str) -> dict[str, Any] | None:
        """The engine's inspect data of one container, or None when it does not exist."""
        try:
            return await self.engine.call("inspect_container", name)
        except NotFound:
            return None

    # --- labels ----------------------------------------------------------------------

    def _labels(self, spec: SandboxSpec, expires: datetime) -> dict[str, str]:
        labels = {f"{self.prefix}{k}": str(v) for k, v in spec.labels.items()}
        labels[f"{self.prefix}managed"] = "true"
        labels[f"{self.prefix}expires-at"] = expires.isoformat(timespec="seconds")
        return labels

    def _info(self, summary: dict[str, Any]) -> SandboxInfo:
        """A container as the engine lists it (one entry of GET /containers/json)."""
        raw = summary.get("Labels") or {}
        internal = {f"{self.prefix}managed", f"{self.prefix}expires-at"}
        labels = {k[len(self.prefix):]: v for k, v in raw.items() if k.startswith(self.prefix) and k not in internal}
        names = summary.get("Names") or []
        return SandboxInfo(
            id=(names[0].lstrip("/") if names else "") or str(summary.get("Id", ""))[:12],
            state=STATES.get(str(summary.get("State") or ""), "unknown"),
            labels=labels,
            expires_at=raw.get(f"{self.prefix}expires-at"),
        )

    # --- the Provider API ------------------------------------------------------------

    def _ca_mount(self, env: dict[str, str]) -> list[Mount]:
        if not self.options["mount_ca_bundle"]:
            return []
        source = Path(str(self.options["ca_bundle"])).expanduser()
        if not source.is_file():
            raise UserError(f"sandbox.docker.ca_bundle: {source} is not a file on this host; "
                            "point it at the host's CA bundle or set sandbox.docker.mount_ca_bundle: false")
        target = sandbox_path(str(self.options["ca_bundle_target"]))
        for key in CA_ENV:
            env.setdefault(key, target)
        return [Mount(target=target, source=str(source.resolve()), type="bind", read_only=True)]

    async def create(self, spec: SandboxSpec) -> DockerSandbox:
        if not spec.image:
            raise UserError("sandbox image: the docker provider needs an image; set the task's image "
                            "or use sandbox.provider: local")
        await self.admit()
        name = f"sandbatch-{uuid.uuid4().hex[:12]}"
        sb = DockerSandbox(self, name, spec)
        expires = datetime.now(timezone.utc) + timedelta(seconds=spec.ttl_seconds)
        env = dict(spec.env)
        mounts = self._ca_mount(env)
        host: dict[str, Any] = {
            "init": bool(self.options["init"]), "mounts": mounts,
            # the model proxy runs on this host: let sandboxes reach it by a stable name
            "extra_hosts": {"host.docker.internal": "host-gateway"},
            "network_mode": "none" if not spec.allow_internet else str(self.options["network"])}
        if int(self.options["pids_limit"]) > 0:  # a fork bomb takes its own sandbox down, not the host
            host["pids_limit"] = int(self.options["pids_limit"])
        if spec.resources.cpu:
            host["nano_cpus"] = int(cpu_count(spec.resources.cpu) * 1e9)
        if spec.resources.memory:
            host["mem_limit"] = host["memswap_limit"] = memory_bytes(spec.resources.memory)  # no swap beyond it
        entrypoint = list(spec.entrypoint or ["sleep", str(spec.ttl_seconds)])
        config = dict(name=name, working_dir=sb.workdir, labels=self._labels(spec, expires), environment=env,
                      entrypoint=entrypoint[:1], command=entrypoint[1:],
                      host_config=self.engine.api.create_host_config(**host))
        try:
            await self._create_container(spec.image, config)
            # the scratch directory, before the start (the workdir exists via its working dir):
            # no command to run for it, and none to prove that commands run (the first one does)
            await self.engine.call("put_archive", name, "/", archive({}, dirs=[TMPDIR]))
            await self.engine.call("start", name)
        except (NotFound, SandboxError) as exc:
            await self.delete(name)  # the create may have gone through before the start failed
            text = str(exc)
            missing = isinstance(exc, NotFound) or images.IMAGE_MISSING.search(text)
            failure = FailureClass.IMAGE if missing else FailureClass.SANDBOX_CREATE
            raise InfraError(f"docker sandbox for image {spec.image}: cannot start a container: {tail(text)}",
                             failure) from None
        return sb

    async def _create_container(self, image: str, config: dict[str, Any]) -> None:
        """Create a container of `image`, pulled first as `pull` says (always, when missing, never)."""
        pull = self.options["pull"]
        if pull == "always":
            await images.pull(self.slow_engine, image)
        try:
            await self.engine.call("create_container", image, **config)
        except NotFound:
            if pull != "missing":
                raise
            await images.pull(self.slow_engine, image)
            await self.engine.call("create_container", image, **config)

    async def image_after(self, spec: SandboxSpec, script: str, timeout: float) -> tuple[str, str] | None:
        """An image of spec.image with `script` run in it (sandbox/docker/images.py)."""
        return await images.image_after(self, spec, script, timeout)

    async def connect(self, sandbox_id: str, spec: SandboxSpec) -> DockerSandbox:
        sb = DockerSandbox(self, sandbox_id, spec)
        await sb._raise_gone("cannot be reattached")
        return sb

    async def list(self, labels: dict[str, str]) -> list[SandboxInfo]:
        filters = [f"{self.prefix}managed=true", *(f"{self.prefix}{k}={v}" for k, v in labels.items())]
        found = await self.engine.call("containers", all=True, filters={"label": filters})
        return sorted((self._info(c) for c in found), key=lambda i: i.id)

    async def delete(self, sandbox_id: str) -> bool:
        # its model-only network's gate first and the network last (the sandbox holds it): a
        # delete cut short leaves a sandbox the reaper finds, never a gate it does not list
        await network.remove_gate(self, sandbox_id)
        try:
            await self.engine.call("remove_container", sandbox_id, v=True, force=True)
            existed = True
        except NotFound:
            existed = False
        except EngineError as exc:
            if "already in progress" not in str(exc):
                raise SandboxError(f"cannot delete docker sandbox {sandbox_id}: {tail(str(exc))}",
                                   FailureClass.SANDBOX) from None
            existed = True
        await network.remove_network(self, sandbox_id)
        return existed
