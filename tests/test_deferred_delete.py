"""A step deletes the sandboxes it is done with after its outputs are written; under the
step server the job is reported done first (common.outputs_done), so the rollout's next
job does not wait for the delete. A step that fails still deletes them."""

import asyncio
from pathlib import Path

import pytest

from sandbatch.core.errors import InfraError
from sandbatch.sandbox.base import SandboxSpec
from sandbatch.sandbox.local import LocalProvider
from sandbatch.steps import common


class ProbeStep(common.Step):
    name = "probe"

    def __init__(self, ctx, sandbox, out: Path, error: bool):
        super().__init__(ctx)
        self.sandbox, self.out, self.error = sandbox, out, error

    async def run(self) -> None:
        self.delete_later(self.sandbox)
        if self.error:
            raise InfraError("boom", "probe")
        self.out.write_text("done")

    def fail(self, exc):
        raise AssertionError("not the last attempt")


def _sandbox(tmp_path):
    provider = LocalProvider({"root": str(tmp_path / "sandboxes")})
    return asyncio.run(provider.create(SandboxSpec(labels={"run": "deferred-delete-test"})))


def _ctx(tmp_path):
    return common.StepContext(tmp_path / "run.json", "t", 0, 1, 2)


@pytest.fixture
def reported(monkeypatch):
    """What the sandbox and the output looked like when the step was reported done."""
    seen = []
    monkeypatch.setattr(common, "outputs_done", lambda: seen.append(("reported", *seen_state())))
    state = {}

    def seen_state():
        return Path(state["sandbox"].root).exists(), state["out"].exists()

    return seen, state


def test_the_step_is_reported_done_after_its_outputs_and_before_the_delete(tmp_path, reported):
    seen, state = reported
    sandbox = _sandbox(tmp_path)
    state.update(sandbox=sandbox, out=tmp_path / "out.txt")
    asyncio.run(common.run_step(ProbeStep(_ctx(tmp_path), sandbox, state["out"], error=False)))
    assert seen == [("reported", True, True)]  # sandbox still there, output written
    assert not Path(sandbox.root).exists()


def test_a_failed_step_still_deletes_and_is_not_reported_done(tmp_path, reported):
    seen, state = reported
    sandbox = _sandbox(tmp_path)
    state.update(sandbox=sandbox, out=tmp_path / "out.txt")
    with pytest.raises(InfraError):
        asyncio.run(common.run_step(ProbeStep(_ctx(tmp_path), sandbox, state["out"], error=True)))
    assert seen == []
    assert not Path(sandbox.root).exists()


def test_without_a_step_server_the_delete_happens_before_the_step_returns(tmp_path):
    assert common.outputs_done is None
    sandbox = _sandbox(tmp_path)
    asyncio.run(common.run_step(ProbeStep(_ctx(tmp_path), sandbox, tmp_path / "out.txt", error=False)))
    assert (tmp_path / "out.txt").exists() and not Path(sandbox.root).exists()
