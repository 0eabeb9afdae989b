"""Prepared images: an image with a preparation script already run, made once per host."""

from __future__ import annotations

import asyncio
import base64
import fcntl
import hashlib
import json
import re
import tempfile
import uuid
from pathlib import Path
from typing import Any, Sequence

from ...core.failures import FailureClass
from ..base import SandboxError, SandboxSpec
from .engine import Engine, EngineOwner, NotFound
from .sandbox import DockerSandbox
from .state import sandbox_path, tail

# the images `image_after` makes: tagged by the source image's name, the workdir and the
# script, labelled with the source image's id and the script's output (base64); `docker image rm $(docker images -q sandbatch/prepared)` frees them
PREPARED = "sandbatch/prepared"
# not under label_prefix: containers inherit an image's labels, and these are no sandbox's
FROM_LABEL, OUTPUT_LABEL = "org.sandbatch.prepared-from", "org.sandbatch.prepared-output"
IMAGE_MISSING = re.compile(r"Unable to find image|No such image|pull access denied|manifest unknown"
                           r"|repository does not exist|not found", re.IGNORECASE)


async def pull(engine: Engine, image: str) -> None:
    repository, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "latest")
    await engine.call("pull", repository, tag=tag or "latest")


async def unavailable(engine: Engine, wanted: list[str], pull: str) -> tuple[str, str] | None:
    """(an image, why) for the first of `wanted` a create cannot have under `pull`: not on
    the engine and either `never` pulled or not found by the registry (one manifest lookup,
    nothing downloaded); None when all can be had. Lookups run 8 at a time."""
    gate = asyncio.Semaphore(8)

    async def why(image: str) -> str | None:
        async with gate:
            if await _inspect_image(engine, image) is not None:
                return None
            if pull == "never":
                return "is not on the engine and sandbox.docker.pull is never"
            try:
                await engine.call("inspect_distribution", image)
            except (NotFound, SandboxError) as exc:
                return f"is not on the engine and its registry does not have it ({exc})"
            return None

    for image, reason in zip(wanted, await asyncio.gather(*map(why, wanted))):
        if reason:
            return image, reason
    return None


async def image_after(provider: EngineOwner, spec: SandboxSpec, script: str,
                      timeout: float) -> tuple[str, str] | None:
    """The image made by running `script` in a container of spec.image, then a commit (the
    source image's entrypoint, command and workdir restored), built on first use under a
    lock on this host and reused; one image inspect per sandbox after that. It is rebuilt
    when the source image's id changes (a newer pull). None when the source image is not
    on the engine yet (its first sandbox pulls it) or `pull: always` asks for fresh images."""
    if not spec.image or provider.options["pull"] == "always":
        return None
    key = hashlib.sha256("\0".join([spec.image, spec.workdir, script]).encode()).hexdigest()[:24]
    tag = f"{PREPARED}:{key}"
    lock = Path(tempfile.gettempdir()) / f"sandbatch-prepared-{key}.lock"
    with open(lock, "a") as fh:
        locked = False
        try:
            while True:  # one build per host; the others wait here, then find it
                source, output = await _prepared(provider.engine, spec.image, tag)
                if source is None or output is not None:
                    return None if source is None else (tag, output)
                if locked:
                    return tag, await _build_after(provider, spec, source, script, tag, timeout)
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    locked = True
                except BlockingIOError:
                    await asyncio.sleep(0.5)
        finally:
            if locked:
                fcntl.flock(fh, fcntl.LOCK_UN)


async def _inspect_image(engine: Engine, name: str) -> dict[str, Any] | None:
    try:
        return await engine.call("inspect_image", name)
    except NotFound:
        return None


async def _prepared(engine: Engine, image: str, tag: str) -> tuple[dict[str, Any] | None, str | None]:
    """(the source image's inspect data or None, the output of `tag` when it was made from it)."""
    source, made = await asyncio.gather(_inspect_image(engine, image), _inspect_image(engine, tag))
    if source is None or made is None:
        return source, None
    labels = (made.get("Config") or {}).get("Labels") or {}
    if labels.get(FROM_LABEL) != source["Id"]:
        return source, None  # made from an older pull of the image
    return source, base64.b64decode(labels.get(OUTPUT_LABEL, "")).decode()


async def _build_after(provider: EngineOwner, spec: SandboxSpec, source: dict[str, Any], script: str, tag: str,
                       timeout: float) -> str:
    # no labels (the image would pass them to every container made from it), no network,
    # no environment of ours; removed by itself when its keep-alive ends
    name = f"sandbatch-prepare-{uuid.uuid4().hex[:12]}"
    engine = provider.engine
    try:
        await engine.call("create_container", source["Id"], **run_container(
            provider, name, sandbox_path(spec.workdir), ["sleep", str(int(timeout) + 120)]))
        await engine.call("start", name)
    except (NotFound, SandboxError) as exc:
        await provider.delete(name)
        raise SandboxError(f"preparing image {spec.image}: cannot start a container: {tail(str(exc))}",
                           FailureClass.SANDBOX_PREPARE) from None
    try:
        res = await DockerSandbox(provider, name, spec).exec(script, timeout=timeout, cwd="/")
        if not res.ok:
            raise SandboxError(f"preparing the repository failed (exit {res.exit_code}): "
                               f"{res.stderr.strip()[-300:]}", FailureClass.SANDBOX_PREPARE)
        config = source.get("Config") or {}
        # an empty entrypoint cannot be set by a change: the container has none already
        changes = [f"ENTRYPOINT {json.dumps(config['Entrypoint'])}"] if config.get("Entrypoint") else []
        changes += [f"CMD {json.dumps(config.get('Cmd') or [])}",
                    f"WORKDIR {config.get('WorkingDir') or '/'}",
                    f"LABEL {FROM_LABEL}={source['Id']}",
                    f"LABEL {OUTPUT_LABEL}={base64.b64encode(res.stdout.encode()).decode()}"]
        repository, _, version = tag.rpartition(":")
        await provider.slow_engine.call("commit", name, repository=repository, tag=version, changes=changes)
        return res.stdout
    finally:
        await provider.delete(name)


def run_container(provider: EngineOwner, name: str, workdir: str, argv: Sequence[str]) -> dict[str, Any]:
    """The create config of a helper container: no labels, network or environment of ours."""
    return dict(name=name, working_dir=workdir, entrypoint=[""], command=list(argv),
                host_config=provider.engine.api.create_host_config(network_mode="none", auto_remove=True))
