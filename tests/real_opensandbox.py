"""The real OpenSandbox server for tests of the opensandbox provider.

`scripts/services/opensandbox.sh` starts it (CI does, through scripts/services.sh); the
tests reach it at SANDBATCH_TEST_OPENSANDBOX_URL (default http://127.0.0.1:18080) with the key
SANDBATCH_TEST_OPENSANDBOX_KEY (default opensandbox-test-key).

The server is shared (other tests, other runs): every sandbox a test makes carries a run
label of its own (`suite.unique_run`), and a test counts and deletes only those.
"""

from __future__ import annotations

import asyncio
import os
import urllib.request
from dataclasses import dataclass
from typing import Any

import pytest

from services import need
from suite import unique_run

URL = os.environ.get("SANDBATCH_TEST_OPENSANDBOX_URL", "http://127.0.0.1:18080")
KEY = os.environ.get("SANDBATCH_TEST_OPENSANDBOX_KEY", "opensandbox-test-key")
KEY_ENV = "SANDBATCH_TEST_OPENSANDBOX_KEY"  # where runs started by tests read the key
IMAGE = "sandbatch/base:bookworm"  # built locally; has no /testbed


@dataclass(frozen=True)
class RealServer:
    url: str
    key: str

    @property
    def domain(self) -> str:
        return self.url.split("://", 1)[1]

    @property
    def protocol(self) -> str:
        return self.url.split("://", 1)[0]

    def options(self, domain: str | None = None, **overrides: dict[str, Any]) -> dict[str, Any]:
        """A `sandbox.opensandbox` block for this server (or a proxy of it at `domain`):
        the schema's defaults with waits that hold on a loaded 2-core machine."""
        opts: dict[str, Any] = {
            # this server has no egress sidecar image (it cannot be pulled here): it refuses every
            # network policy, so its sandboxes run unrestricted (tests/test_network.py)
            "network_policy": False,
            "connection": {"domain": domain or self.domain, "protocol": self.protocol, "api_key_env": KEY_ENV,
                           "request_timeout": 30},
            "create": {"backoff_initial": 0.2, "backoff_max": 1, "ready_timeout": 60},
            "probe": {"interval": 0.2, "timeout": 60},
            "operations": {"backoff_initial": 0.1, "backoff_max": 0.5, "timeout": 60, "exec_grace": 10},
        }
        for section, values in overrides.items():
            opts.setdefault(section, {}).update(values)
        return opts


def host_address(interface: str = "docker0") -> str:
    """This host's address on the Docker bridge: where the server's sandboxes (bridge
    network) reach a service of the test, such as the model proxy (`model.proxy.advertise_host`)."""
    import fcntl
    import socket
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        packed = fcntl.ioctl(sock.fileno(), 0x8915, struct.pack("256s", interface.encode()[:15]))  # SIOCGIFADDR
    return socket.inet_ntoa(packed[20:24])


def unavailable() -> str | None:
    """None when the server answers /health, else why not and how to start it."""
    try:
        with urllib.request.urlopen(f"{URL}/health", timeout=5) as resp:
            if resp.status == 200:
                return None
            return f"OpenSandbox server at {URL} answered /health with {resp.status}"
    except OSError as exc:
        return (f"no OpenSandbox server at {URL} ({exc}); "
                "start it with `bash scripts/services/opensandbox.sh` (as root, Docker running)")


def with_provider(options: dict[str, Any], fn):
    """`await fn(provider)` with a fresh opensandbox provider on a fresh event loop."""
    from sandbatch.sandbox import provider_class

    async def main():
        async with provider_class("opensandbox")(options) as provider:
            return await fn(provider)

    return asyncio.run(main())


def reap_run(real: RealServer, run: str) -> list[str]:
    """Delete every sandbox labelled with `run`; the ids deleted."""
    from sandbatch.sandbox.reaper import reap

    return with_provider(real.options(), lambda p: reap(p, {"run": run}))


@pytest.fixture(scope="session")
def real_opensandbox() -> RealServer:
    need(unavailable())
    os.environ[KEY_ENV] = KEY  # runs and providers the tests start read it from there
    return RealServer(URL, KEY)


@pytest.fixture
def os_run(real_opensandbox):
    """A run label of this test's own; at the end no sandbox may carry it (any left is
    deleted, and the test fails)."""
    run = unique_run("ost")
    yield run
    left = reap_run(real_opensandbox, run)
    assert left == [], f"sandboxes left behind: {left}"
