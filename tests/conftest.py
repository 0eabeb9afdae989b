"""How the suite's tests run at once (pytest-xdist; scripts/test.sh passes `-n N --dist loadgroup
--no-loadscope-reorder`): which share a worker, and which start first.

Under `--dist loadgroup` each test is a unit of work of its own, sent to whichever worker is free,
except:
- tests marked `xdist_group(NAME)` in their module: they run on one worker, one after another,
  because they must not overlap (the single Slurm node's CPUs; the corpus rows' image builds);
- tests that use a module-scoped fixture (one real run that all of them read): they share a worker
  too, grouped by their module, so that the fixture is set up once and not once per worker.
Units start in the order of the items, which puts the slow ones first (the `slow` mark): a long
test that starts last ends the run alone.

A session-scoped fixture runs once per worker: one that builds something shared (an image,
node_modules) builds it under `shared.built_once`, so that one worker builds it and the others
wait for it and reuse it.

Every run name and label a test gives the shared engine and servers carries this session's token
(`suite.unique_run`; `suite.pytest_configure`, imported here, takes the token).
"""

from __future__ import annotations

import pytest

from suite import pytest_configure  # noqa: F401 (the hook: this session's token)

SHARED_SCOPES = {"module", "class", "package"}


def _shares_a_scoped_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(defs and defs[-1].scope in SHARED_SCOPES for defs in info.name2fixturedefs.values())


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook turns the groups into node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("xdist_group") is None and _shares_a_scoped_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: slow first


@pytest.fixture(autouse=True)
def _agent_threads_end_with_their_test():
    """A host-mode mini-swe-agent runs on a daemon thread of the process that runs its step; a
    step stopped at its timeout leaves it to end by itself (the step's process exits right after,
    in a run). In the suite that process is a worker that goes on to the next test, so the thread
    would run beside it; CPython 3.11 keeps the AST constructor's recursion count per interpreter,
    not per thread, and `ast.parse` in two threads at once (3.11's traceback formatting parses the
    failing line) can fail with "AST constructor recursion depth mismatch" in whichever test
    happens to parse then. Each test ends when its agent threads have."""
    import threading
    import time

    yield
    deadline = time.monotonic() + 120  # the longest command a host-mode test gives the agent, and more
    left = [t for t in threading.enumerate() if t.name == "mini-swe-agent"]
    for thread in left:
        thread.join(max(0.0, deadline - time.monotonic()))
    alive = [t for t in left if t.is_alive()]
    assert not alive, f"mini-swe-agent threads still running 120 s after the test: {alive}"
