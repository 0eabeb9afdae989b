"""This test suite's own names for what it makes on shared machinery (the Docker engine, the
OpenSandbox server, Slurm, Phoenix): run names, run labels, job names.

Every name carries the suite's token: one per pytest session, the same in each of its xdist
workers (xdist's own test run id), another in the next session. A suite killed part-way leaves
containers labelled with its token; a second suite on the same engine, or the next one, names
its runs with another, so its "nothing left" checks, which count only their own run's
sandboxes, never count them. A name taken from the test alone (its tmp directory's name) would
be the same in every suite.
"""

from __future__ import annotations

import uuid

import pytest

_token: str | None = None


def pytest_configure(config: pytest.Config) -> None:
    """Take the session's token: the xdist run's id in a worker, a fresh one otherwise."""
    global _token
    workerinput = getattr(config, "workerinput", None)
    _token = (workerinput["testrunuid"] if workerinput else uuid.uuid4().hex)[:8]


def token() -> str:
    """This session's token (a fresh one when the module is used outside pytest)."""
    global _token
    if _token is None:
        _token = uuid.uuid4().hex[:8]
    return _token


def unique_run(prefix: str) -> str:
    """A run name (and run label) no other test of this suite, nor any other suite, carries:
    `<prefix>-<suite token>-<6 hex of its own>`, a valid run name while `prefix` is one of up
    to 40 characters."""
    return f"{prefix}-{token()}-{uuid.uuid4().hex[:6]}"
