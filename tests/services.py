"""One switch for every test that needs a service (Docker, OpenSandbox, Slurm, Node, Chromium).

Outside CI a missing service skips the test with the reason and the fix. With
`SANDBATCH_REQUIRE_SERVICES=1` (set by .ci/run) the same test fails instead: CI must never
pass by skipping what it was meant to test. Every service fixture and check calls `need`.
"""

from __future__ import annotations

import os
import shutil
from typing import NoReturn

import pytest

REQUIRE_ENV = "SANDBATCH_REQUIRE_SERVICES"


def required() -> bool:
    return os.environ.get(REQUIRE_ENV, "") not in ("", "0")


def missing(why: str) -> NoReturn:
    """Skip (or, under the switch, fail) the calling test because a service is missing."""
    if required():
        pytest.fail(f"required service missing ({REQUIRE_ENV}=1): {why}", pytrace=False)
    pytest.skip(why)


def need(why: str | None) -> None:
    """`missing(why)` when `why` says what is missing; nothing when it is None."""
    if why is not None:
        missing(why)


def need_program(name: str, fix: str) -> str:
    """The path of a program on PATH (node, npm, chromium), or `missing`."""
    path = shutil.which(name)
    if path is None:
        missing(f"{name} is not installed; {fix}")
    return path
