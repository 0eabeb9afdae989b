"""The real OpenSandbox server for tests of the opensandbox provider.

`scripts/services/opensandbox.sh` starts it (CI does, through scripts/services.sh); the
tests reach it at SANDBATCH_TEST_OPENSANDBOX_URL (default http://127.0.0.1:18080) with the key
SANDBATCH_TEST_OPENSANDBOX_KEY (default opensandbox-test-key).
"""

from __future__ import annotations

import os
import urllib.request
from dataclasses import dataclass

import pytest

from services import need

URL = os.environ.get("SANDBATCH_TEST_OPENSANDBOX_URL", "http://127.0.0.1:18080")
KEY = os.environ.get("SANDBATCH_TEST_OPENSANDBOX_KEY", "opensandbox-test-key")


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


@pytest.fixture(scope="session")
def real_opensandbox() -> RealServer:
    need(unavailable())
    return RealServer(URL, KEY)
