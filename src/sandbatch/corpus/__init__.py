"""The real SWE-bench rows rebuilt from public history (corpus/ at the repository root,
corpus/README.md), and their checks. May import core, tasks and grading; no run code imports it.

One directory per row, holding

- `row.json`: the row as SWE-bench has it (instance_id, repo, base_commit, version, patch,
  test_patch, FAIL_TO_PASS, PASS_TO_PASS, ...) plus `provenance` (where every part came from)
  and `source` (how the repository at the base commit is obtained);
- `Dockerfile`: the environment as swebench's spec for the repository and version pins it,
  built FROM sandbatch/base:bookworm with nothing pulled (sandbatch.corpus.build);
- what the Dockerfile copies (a shallow git archive of the base commit, requirements);
- `lists.json`: how FAIL_TO_PASS / PASS_TO_PASS were computed (sandbatch.corpus.lists).

A row's image is tagged by a hash of what builds it, so a built image is reused and a
changed recipe builds a new one; `tasks()` writes the rows as a SWE-bench task file whose
`image` is that tag.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from .. import REPO_ROOT
from ..core.errors import InfraError, UserError
from ..core.failures import FailureClass

ROOT = REPO_ROOT / "corpus"
COMMON = ROOT / "_common"  # files every build context gets (the conda stand-in)
REGISTRY = "sandbatch/corpus"
# how build.py copies the spec's Python (part of every tag: a change to it builds every image anew)
PYTHON_COPY = "site-packages: pip and setuptools only"
# what a row directory holds that does not build its image
NOT_BUILT = {"row.json", "lists.json", "README.md"}
TASK_FIELDS = ("instance_id", "repo", "base_commit", "version", "problem_statement", "patch", "test_patch",
               "FAIL_TO_PASS", "PASS_TO_PASS", "environment_setup_commit", "created_at")


@dataclass
class Row:
    dir: Path
    data: dict

    @property
    def id(self) -> str:
        return self.data["instance_id"]

    @property
    def python(self) -> str | None:
        """The spec's Python version (a pyenv build of it is copied into the build context)."""
        return (self.data.get("env") or {}).get("python")

    @property
    def kind(self) -> str:
        """The benchmark kind the row is graded as: `swebench` (Verified, Multilingual) or `swebench_pro`."""
        return self.data.get("kind") or "swebench"

    def recipe_files(self) -> list[Path]:
        own = [p for p in sorted(self.dir.rglob("*")) if p.is_file() and p.name not in NOT_BUILT]
        return own + [p for p in sorted(COMMON.rglob("*")) if p.is_file()]

    def image(self) -> str:
        """The image tag: a hash of the Dockerfile, every file it may copy, and the Python it gets."""
        h = hashlib.sha256(f"python={self.python} {PYTHON_COPY}\n".encode())
        for p in self.recipe_files():
            rel = p.relative_to(ROOT).as_posix()
            h.update(f"{rel}\0{hashlib.sha256(p.read_bytes()).hexdigest()}\n".encode())
        return f"{REGISTRY}:{self.id.lower()}-{h.hexdigest()[:12]}"

    def task(self, patch: str | None = None) -> dict:
        """The row as a SWE-bench task row on its image; `patch`: another patch for the oracle to apply
        (the row's `noop_patch`, which only adds a comment, must not resolve)."""
        if self.kind == "swebench_pro":
            return self._pro_task(patch)
        out = {k: self.data[k] for k in TASK_FIELDS if k in self.data}
        out["image"] = self.image()
        if patch is not None:
            out["patch"] = patch
        return out

    def _pro_task(self, patch: str | None) -> dict:
        """The row in the Pro dataset's columns, with its scripts inline and its image."""
        d = self.data
        return {"instance_id": d["instance_id"], "repo": d["repo"], "repo_language": d.get("repo_language", ""),
                "base_commit": d["base_commit"], "problem_statement": d["problem_statement"],
                "requirements": d.get("requirements", ""), "interface": d.get("interface", ""),
                "patch": d["patch"] if patch is None else patch, "test_patch": d["test_patch"],
                "fail_to_pass": d["FAIL_TO_PASS"], "pass_to_pass": d["PASS_TO_PASS"],
                "selected_test_files_to_run": d["selected_test_files_to_run"],
                "before_repo_set_cmd": d["before_repo_set_cmd"], "image": self.image(),
                "run_script": self.file("run_script.sh"), "parser_script": self.file("parser.py")}

    def file(self, name: str) -> str:
        """A file of the row's directory (run_script.sh, parser.py of a Pro row)."""
        return (self.dir / name).read_text(encoding="utf-8")

    def save(self) -> None:
        (self.dir / "row.json").write_text(json.dumps(self.data, indent=1, ensure_ascii=False) + "\n",
                                           encoding="utf-8")


def load(path: Path) -> Row:
    f = path / "row.json"
    try:
        data = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{f}: not a readable JSON row ({exc})") from None
    for key in ("instance_id", "repo", "base_commit", "patch", "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS",
                "provenance", "source"):
        if key not in data:
            raise UserError(f"{f}: field {key} is missing (corpus/README.md lists a row's fields)")
    if data["instance_id"] != path.name:
        raise UserError(f"{f}: field instance_id {data['instance_id']!r} differs from its directory {path.name!r}")
    if not (path / "Dockerfile").is_file():
        raise UserError(f"{path}: no Dockerfile (corpus/README.md, 'Adding a row')")
    return Row(path, data)


def rows(ids: list[str] | None = None) -> list[Row]:
    """The corpus's rows (those named, in that order; all when None)."""
    every = {p.name: p for p in sorted(ROOT.iterdir()) if p.is_dir() and not p.name.startswith("_")}
    unknown = [i for i in ids or [] if i not in every]
    if unknown:
        raise UserError(f"corpus: no row {unknown[0]!r} under {ROOT} (rows: {', '.join(every)})")
    return [load(every[i]) for i in (ids or list(every))]


def store(row: Row, before: dict[str, str], after: dict[str, str], passed, noop: str) -> tuple[list, list]:
    """Set and save the row's FAIL_TO_PASS / PASS_TO_PASS (tests passing after the gold patch,
    failing or passing before it, by the evaluation's own `passed(statuses, test)`) and noop_patch."""
    f2p = sorted(t for t in after if passed(after, t) and not passed(before, t))
    p2p = sorted(t for t in after if passed(after, t) and passed(before, t))
    if not f2p:
        raise InfraError(f"{row.id}: no test fails before the gold patch and passes after it",
                         FailureClass.CORPUS_LISTS)
    row.data["FAIL_TO_PASS"], row.data["PASS_TO_PASS"], row.data["noop_patch"] = f2p, p2p, noop
    row.save()
    return f2p, p2p
