"""Agents published on npm (OpenCode, Claude Code): installed by `npm install -g --prefix`
under the sandbox's scratch space, or uploaded from this host (the binary, or a prefix such
an install made), or already in the image (`path`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from ..core.errors import UserError
from ..sandbox import Sandbox
from ._process import check_runs, install_options, npm_install, upload_source
from .base import Harness, InstallOptions, Options, RunContext

INSTALL_METHODS = ("npm", "upload", "path")


class NpmInstall(InstallOptions):
    method: str = Field("npm", description=(
        "npm (needs node and registry access in the sandbox) | upload (from this host) | path (in the image)."))
    package: str = Field(description="The npm package installed.")
    env: dict[str, Any] = Field(default_factory=dict, description=(
        "Extra environment of the install command (npm_config_cache, registry, ...)."))


class NpmHarness(Harness):
    """A harness whose agent is the npm package `install.package`, run as `binary`."""

    binary: ClassVar[str]  # the program's name in the package's bin/
    version_env: ClassVar[dict[str, str]] = {}  # extra environment of `binary --version`

    def check_config(self, opts: Options) -> None:
        super().check_config(opts)
        install = install_options(self.name, opts.install, INSTALL_METHODS)
        src = Path(install.source).expanduser() if install.method == "upload" else None
        if src is not None and src.is_dir() and not (src / "bin" / self.binary).exists():
            raise UserError(f"harness.config.install.source: {src} has no bin/{self.binary}; give the {self.binary} "
                            f"binary or a prefix made by `npm install -g --prefix DIR {install.package}`")

    def _prefix(self, sandbox: Sandbox) -> str:
        return f"{sandbox.tmpdir}/{self.name}"

    def _binary(self, sandbox: Sandbox, opts: Options) -> str:
        install = opts.install
        if install.method == "path":
            return install.path
        if install.method == "upload" and Path(install.source).expanduser().is_file():
            return f"{self._prefix(sandbox)}/{self.binary}"
        return f"{self._prefix(sandbox)}/bin/{self.binary}"

    async def install(self, sandbox: Sandbox, ctx: RunContext) -> None:
        self.check_config(ctx.options)
        install, prefix, binary = ctx.options.install, self._prefix(sandbox), self._binary(sandbox, ctx.options)
        timeout = ctx.timeouts.install
        if install.method == "upload":
            source = Path(install.source).expanduser()
            await upload_source(sandbox, str(source), binary if source.is_file() else prefix, timeout)
        elif install.method == "npm":
            await npm_install(sandbox, install, self.version(ctx), prefix, timeout=timeout, env=self.state_env(sandbox))
        await check_runs(sandbox, binary, {**self.state_env(sandbox), **self.version_env})
