"""A task image whose repository carries its future (tests/fixtures/leaky_repo.sh), and the
check that an agent sandbox prepared from it holds nothing of that future.

The check looks the way an agent would: every git command that lists history, and a walk
of the .git directories' files (loose objects decompressed, pack indexes read) on this host.
"""

from __future__ import annotations

import hashlib
import io
import json
import shlex
import struct
import subprocess
import tarfile
import zlib
from dataclasses import dataclass

from workflow_util import REPO, SMOKE_TASKS

BUILDER = REPO / "tests" / "fixtures" / "leaky_repo.sh"
CALC = REPO / "data" / "smoke" / "repos" / "calc"
EXPECTED = "/leaky"  # where the image keeps what the builder wrote (outside the workdir)
# what an image's own setup leaves uncommitted (SWE-bench images): it must survive as it is
DIRTY = "echo setup > setup_env.txt && echo '# local setting' >> pyproject.toml && echo 'X = 1' > staged.py && git add staged.py"
SECTIONS = {
    "log": "git log --all --format=%H",
    "tags": "git tag",
    "branches": "git branch -a --format='%(refname)'",
    "reflog": "git reflog --format=%H",
    "stash": "git stash list",
    "fsck": "git fsck --unreachable --no-progress 2>&1",
    "objects": "git cat-file --batch-all-objects --batch-check='%(objectname)'",
    "remotes": "git config --get-regexp '^(remote|url|branch|submodule)[.]' || true",
}


def image_tag() -> str:
    """The leaky image's tag: the builder and the calc repository, hashed (reused when present)."""
    digest = hashlib.sha256(BUILDER.read_bytes())
    for path in sorted(CALC.rglob("*")):
        if path.is_file():
            digest.update(path.read_bytes())
    return f"sandbatch/test-leaky-repo:{digest.hexdigest()[:12]}"


def build_image(docker: str, base_image: str, context) -> str:
    tag = image_tag()
    if subprocess.run([docker, "image", "inspect", tag], capture_output=True).returncode == 0:
        return tag
    subprocess.run(["cp", "-r", str(CALC), str(context / "calc")], check=True)
    (context / "leaky_repo.sh").write_bytes(BUILDER.read_bytes())
    (context / "Dockerfile").write_text(
        f"FROM {base_image}\nCOPY calc /src/calc\nCOPY leaky_repo.sh /src/\n"
        f"RUN bash /src/leaky_repo.sh /testbed /src/calc {EXPECTED} && rm -rf /src\n")
    proc = subprocess.run([docker, "build", "-q", "-t", tag, str(context)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return tag


@dataclass
class Expected:
    base: str
    allowed: set[str]
    future: set[str]
    worktree: str = "/future-worktree"


async def expected_of(sandbox, where: str = EXPECTED, worktree: str = "/future-worktree") -> Expected:
    read = lambda name: sandbox.download(f"{where}/{name}")  # noqa: E731
    return Expected(base=(await read("base")).decode().strip(), allowed=set((await read("allowed")).decode().split()),
                    future=set((await read("future")).decode().split()), worktree=worktree)


async def dirty(sandbox) -> tuple[str, str]:
    """Leave setup uncommitted in the workdir: (git status, the staged blob's id)."""
    res = await sandbox.exec(f"{DIRTY} && git rev-parse :staged.py && git status --porcelain=v1 "
                             "--ignore-submodules=none", timeout=60, cwd=sandbox.workdir)
    assert res.ok, res.stderr
    blob, _, status = res.stdout.partition("\n")
    return status, blob.strip()


async def look(sandbox) -> dict[str, dict[str, list[str]]]:
    """What the agent would find: each SECTIONS listing per repository, the status, HEAD."""
    parts = []
    for repo in (".", "lib"):
        for name, cmd in SECTIONS.items():
            parts.append(f"echo '@@ {repo} {name}'; (cd {repo} && {cmd})")
    parts += ["echo '@@ . status'; git status --porcelain=v1 --ignore-submodules=none",
              "echo '@@ . head'; git rev-parse HEAD", "echo '@@ . history'; git log --format=%H"]
    res = await sandbox.exec("; ".join(parts), timeout=120, cwd=sandbox.workdir)
    assert res.ok, res.stderr
    found: dict[str, dict[str, list[str]]] = {}
    current: list[str] = []
    for line in res.stdout.splitlines():
        if line.startswith("@@ "):
            _, repo, name = line.split(" ")
            current = found.setdefault(repo, {}).setdefault(name, [])
        elif line.strip():
            current.append(line.strip())
    return found


async def git_files(sandbox) -> dict[str, bytes]:
    """Every file of the workdir's git directories, read on this host."""
    archive = f"{sandbox.tmpdir}/git-dirs.tar"
    res = await sandbox.exec(f"tar -cf {shlex.quote(archive)} .git lib/.git", timeout=120, cwd=sandbox.workdir)
    assert res.ok, res.stderr
    with tarfile.open(fileobj=io.BytesIO(await sandbox.download(archive))) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def objects_in(files: dict[str, bytes]) -> set[str]:
    """Object ids in the files: loose objects (decompressed and hashed) and pack indexes (v2)."""
    ids: set[str] = set()
    for name, data in files.items():
        parts = name.split("/")
        if len(parts) >= 3 and parts[-3] == "objects" and len(parts[-2]) == 2:
            body = zlib.decompress(data)
            oid = hashlib.sha1(body).hexdigest()
            assert oid == parts[-2] + parts[-1], name
            ids.add(oid)
        elif name.endswith(".idx"):
            assert data[:8] == b"\377tOc\0\0\0\2", name
            count = struct.unpack(">I", data[8 + 255 * 4:8 + 256 * 4])[0]
            start = 8 + 256 * 4
            ids.update(data[start + 20 * i:start + 20 * (i + 1)].hex() for i in range(count))
    return ids


async def assert_no_future(sandbox, expected: Expected, status_before: str, staged: str) -> None:
    """Nothing of the future is left, by any of the ways of looking; the past and the work tree are."""
    allowed = expected.allowed | {staged}
    found = await look(sandbox)
    for repo in (".", "lib"):
        seen = found[repo]
        listed = set(seen.get("log", [])) | set(seen.get("reflog", [])) | set(seen.get("objects", []))
        assert listed and listed <= allowed, (repo, listed - allowed)
        assert not listed & expected.future
        assert seen.get("tags", []) == (["v1.0"] if repo == "." else []), seen.get("tags")
        assert all("detached" in b or "no branch" in b for b in seen.get("branches", [])), seen["branches"]
        assert not seen.get("reflog") and not seen.get("stash") and not seen.get("remotes"), seen
        assert not seen.get("fsck"), seen["fsck"]
    top = found["."]
    assert top["head"] == [expected.base] and len(top["history"]) == 2
    assert "\n".join(top["status"]) == status_before.strip()
    files = await git_files(sandbox)
    on_disk = objects_in(files)
    assert on_disk and on_disk <= allowed, on_disk - allowed
    assert on_disk == set(found["."]["objects"]) | set(found["lib"]["objects"])
    needles = [b"sandbatch-future", b"example.invalid", *(f.encode() for f in expected.future)]
    for name, data in files.items():
        text = zlib.decompress(data) if "/objects/" in name and not name.endswith((".idx", ".pack")) else data
        assert not any(n in text for n in needles), name
    gone = await sandbox.exec(f"test ! -e {shlex.quote(expected.worktree)}", timeout=30)
    assert gone.ok, "the linked worktree of a future commit is still there"


def task_rows(tmp_path, image: str, base: str):
    """The smoke calc-1 row as an image row: the repository is the image's, at `base`."""
    [row] = [json.loads(line) for line in SMOKE_TASKS.read_text().splitlines() if '"smoke__calc-1"' in line]
    rows = []
    for kind in ("hostile", "honest"):
        rows.append({**{k: v for k, v in row.items() if k != "repo_dir"}, "instance_id": f"leaky__{kind}",
                     "problem_statement": f"{row['problem_statement']}\n(LEAKY-{kind.upper()})",
                     "image": image, "workdir": "/testbed", "base_commit": base})
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
