"""Patch extraction: new, deleted and binary files survive a round trip through `git apply`."""

import asyncio
import subprocess

from sandbatch.sandbox.local import LocalProvider
from sandbatch.sandbox.base import SandboxSpec
from sandbatch.sandbox.prepare import prepare_repo
from sandbatch.steps.patch import diff_script
from sandbatch.tasks import Task

BINARY = bytes(range(256)) * 4


def _task(repo_dir):
    return Task(id="t", instance_id="t", repo_dir=str(repo_dir))


def test_added_deleted_binary_and_excluded_files(tmp_path):
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "keep.py").write_text("x = 1\n")
    (repo / "pkg" / "gone.py").write_text("y = 2\n")
    (repo / "logo.bin").write_bytes(b"\x00old")

    async def scenario():
        provider = LocalProvider({"root": str(tmp_path / "sandboxes")})
        sb = await provider.create(SandboxSpec())
        base = await prepare_repo(sb, _task(repo), timeout=60)
        wd = sb.workdir
        # the agent's work: edit, add (text and binary), delete, plus state that must stay out
        edit = (f"cd {wd} && echo 'x = 2' > pkg/keep.py && echo 'z = 3' > pkg/new.py && rm pkg/gone.py && "
                f"mkdir -p pkg/__pycache__ && echo junk > pkg/__pycache__/keep.cpython-311.pyc && "
                f"printf 'no newline at end' > notes.txt")
        assert (await sb.exec(edit, timeout=30)).ok
        await sb.upload(f"{wd}/logo.bin", BINARY)
        await sb.upload(f"{wd}/new.bin", BINARY[::-1])
        out = f"{sb.tmpdir}/agent.patch"
        res = await sb.exec(diff_script(wd, base, out, ["**/__pycache__/**", "**/*.pyc"]), timeout=30)
        assert res.ok, res.stderr
        data = await sb.download(out)
        await sb.delete()
        assert await provider.list({}) == []
        return data, sorted(res.stdout.split())

    patch, files = asyncio.run(scenario())
    assert files == ["logo.bin", "new.bin", "notes.txt", "pkg/gone.py", "pkg/keep.py", "pkg/new.py"]
    assert patch.endswith(b"\n") and b"GIT binary patch" in patch and b"__pycache__" not in patch

    # applying it to a fresh copy of the base reproduces the agent's tree exactly
    fresh = tmp_path / "fresh"
    subprocess.run(["cp", "-r", str(repo), str(fresh)], check=True)
    (tmp_path / "p.diff").write_bytes(patch)
    subprocess.run(["git", "apply", "--binary", str(tmp_path / "p.diff")], cwd=fresh, check=True)
    assert (fresh / "logo.bin").read_bytes() == BINARY
    assert (fresh / "new.bin").read_bytes() == BINARY[::-1]
    assert (fresh / "pkg" / "new.py").read_text() == "z = 3\n"
    assert not (fresh / "pkg" / "gone.py").exists()
    assert (fresh / "notes.txt").read_text() == "no newline at end"


def test_modes_the_checkout_was_given_are_not_in_the_patch(tmp_path):
    """An image that `chmod -R 777`s its checkout without committing it (SWE-bench's JavaScript
    images) leaves every tracked file's mode changed; the patch holds only the agent's edit."""
    repo = tmp_path / "repo"
    (repo / "__tests__").mkdir(parents=True)
    (repo / "src.js").write_text("a = 1\n")
    (repo / "__tests__" / "a.test.js").write_text("test('a', () => {})\n")

    async def scenario():
        provider = LocalProvider({"root": str(tmp_path / "sandboxes")})
        sb = await provider.create(SandboxSpec())
        base = await prepare_repo(sb, _task(repo), timeout=60)
        wd = sb.workdir
        assert (await sb.exec(f"cd {wd} && chmod -R 777 . && echo 'a = 2' > src.js", timeout=30)).ok
        out = f"{sb.tmpdir}/agent.patch"
        res = await sb.exec(diff_script(wd, base, out, []), timeout=30)
        assert res.ok, res.stderr
        patch = (await sb.download(out)).decode()
        await provider.delete(sb.id)
        return res.stdout.split(), patch

    names, patch = asyncio.run(scenario())
    assert names == ["src.js"] and "mode" not in patch and "+a = 2" in patch, patch
