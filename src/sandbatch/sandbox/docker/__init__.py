"""`docker` provider: each sandbox is a container on a local Docker engine.

The engine is spoken to over its socket through docker-py (engine.py): a `docker` CLI
process per call cost 12-16 ms of host CPU, the API call 0.5-4 ms, and a rollout makes
20-30 of them. Neither can stop a timed-out exec by closing its stream, so timeouts kill
inside the container (sandbox.py, `exec`).

A container carries:
- labels `<prefix><key>` for the spec's labels, `<prefix>managed=true` (so `list` sees only
  our containers) and `<prefix>expires-at` (ISO 8601, UTC): when the TTL ends, as `list`
  reports it (the keep-alive entrypoint below is what enforces it);
- a keep-alive entrypoint that replaces the image's own (some images start /bin/bash,
  which would exit at once without a terminal): `sleep <ttl_seconds>`, so a container
  nobody reaps still stops by itself when its TTL is over; under `--init` so orphans of
  killed commands are reaped instead of piling up as zombies;
- network `none` when the spec forbids internet access;
- cpu and memory limits (no swap beyond the memory limit); the disk size is not applied
  (overlay2 needs an xfs backing filesystem with project quotas for that);
- optionally the host's CA bundle, read-only, at the image's bundle path, with the usual
  environment variables pointing at it, for hosts whose traffic goes through a TLS proxy.

Its scratch directory is /tmp/sandbatch (`tmpdir`), put in before the container starts.
Commands run through exec; HOME stays the image's (SWE-bench style images keep their
environment activation in /root/.bashrc).

Modules: state.py (the engine's container states, quantities), engine.py (the API
client), sandbox.py (commands and files), provider.py (create, list, delete), images.py
(prepared images: `image_after`).
"""

from .images import FROM_LABEL, OUTPUT_LABEL, PREPARED
from .provider import DEFAULTS, DockerProvider
from .sandbox import EXEC_MARK, TMPDIR, DockerSandbox
from .state import ContainerState, SandboxOOM, container_state, cpu_count, memory_bytes

__all__ = ["DEFAULTS", "EXEC_MARK", "FROM_LABEL", "OUTPUT_LABEL", "PREPARED", "TMPDIR", "ContainerState",
           "DockerProvider", "DockerSandbox", "SandboxOOM", "container_state", "cpu_count", "memory_bytes"]
