"""Making a row directory from a repository's public git history (corpus/README.md, 'Adding
a row'): the base commit as a shallow git archive (the commit itself, no history before or
after it), the gold and test patches split out of the real fix (base..fix), and a
Dockerfile from swebench's spec for the repository and version."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import tempfile
from pathlib import Path

from ..core.errors import UserError
from . import ROOT, Row

ARCHIVE = "source.git.tar.xz"
# what SWE-bench puts in test_patch: a path with a test directory or a test file name
_TEST_PATH = re.compile(r"(^|/)(tests?|testing|e2e)(/|$)|(^|/)(test_[^/]*|[^/]*_tests?\.py|conftest\.py)$")
# what it leaves out of the gold patch: release notes and documentation
_NOT_CODE = re.compile(r"^(changelog|changes|docs?|doc/en)/|\.(rst|md|txt)$|^(AUTHORS|CHANGES|HISTORY)")


def _git(gitdir: Path | str, *args: str, check: bool = True) -> str:
    res = subprocess.run(["git", "--git-dir", str(gitdir), *args], capture_output=True, text=True)
    if res.returncode != 0 and not check:
        return ""
    if res.returncode != 0:
        raise UserError(f"git {' '.join(args)}: {res.stderr.strip()[-300:]}")
    return res.stdout


def split_fix(gitdir: Path, base: str, fix: str) -> tuple[str, str]:
    """(gold patch, test patch): the fix's own changes (from where its branch left the base's history,
    as a pull request's diff shows them), code files and test files apart."""
    base = _git(gitdir, "merge-base", base, fix).strip()
    files = [f for f in _git(gitdir, "diff", "--name-only", base, fix).splitlines() if f]
    tests = [f for f in files if _TEST_PATH.search(f)]
    code = [f for f in files if f not in tests and not _NOT_CODE.search(f)]
    if not code or not tests:
        raise UserError(f"{base}..{fix}: code files {code}, test files {tests}: a row needs both")
    return (_git(gitdir, "diff", "--no-color", base, fix, "--", *code),
            _git(gitdir, "diff", "--no-color", base, fix, "--", *tests))


def shallow_archive(gitdir: Path, commit: str, out: Path) -> None:
    """A .git holding only `commit` (shallow: its parents are named, not present), xz-compressed."""
    with tempfile.TemporaryDirectory() as tmp:
        run = lambda *a: subprocess.run(a, cwd=tmp, check=True, capture_output=True)  # noqa: E731
        run("git", "init", "-q")
        run("git", "-c", "protocol.version=2", "fetch", "-q", "--depth", "1", f"file://{gitdir}", commit)
        run("git", "update-ref", "refs/heads/main", commit)
        run("git", "symbolic-ref", "HEAD", "refs/heads/main")
        run("git", "gc", "-q", "--aggressive", "--prune=now")
        run("rm", "-rf", ".git/hooks", ".git/logs", ".git/FETCH_HEAD", ".git/description", ".git/info")
        run("tar", "--sort=name", "--owner=0", "--group=0", "--mtime=@0", "-cJf", str(out), ".git")


def scm_version(gitdir: Path, commit: str) -> str | None:
    """The version setuptools_scm gives the commit in the full history (4.5.0-3-g58e6a09 -> 4.5.1.dev3)
    when the repository takes its version from setuptools_scm; the shallow archive has no tags, so the
    image pretends it."""
    uses = [f for f in ("setup.py", "setup.cfg", "pyproject.toml")
            if re.search(r"setuptools[_-]scm|use_scm_version", _git(gitdir, "show", f"{commit}:{f}", check=False))]
    if not uses:
        return None
    try:
        desc = _git(gitdir, "describe", "--tags", "--long", commit).strip()
    except UserError:
        return None
    m = re.match(r"^v?(\d+(?:\.\d+)*)(\.dev\d*)?-(\d+)-g[0-9a-f]+$", desc)  # v5.1.dev: a dev tag unnumbered
    if not m:
        return None
    if m.group(3) == "0":
        return m.group(1) + ((m.group(2) or "") if m.group(2) != ".dev" else ".dev0")
    if m.group(2):  # a dev tag (7.2.0.dev0): the distance becomes its dev number
        return f"{m.group(1)}.dev{m.group(3)}"
    parts = m.group(1).split(".")
    parts[-1] = str(int(parts[-1]) + 1)
    return f"{'.'.join(parts)}.dev{m.group(3)}"


def requirements(gitdir: Path, commit: str, repo: str) -> str:
    """The repository's requirements at the commit, as swebench's get_requirements_by_commit joins
    them (`-r` includes inlined, `-e .` and comments left out), cleaned by its clean_requirements."""
    from swebench.harness.constants import MAP_REPO_TO_REQS_PATHS
    from swebench.harness.test_spec.python import clean_requirements

    skip = lambda ln: ln.strip().startswith(("-e .", "#", ".[test"))  # noqa: E731
    for path in MAP_REPO_TO_REQS_PATHS[repo]:
        try:
            text = _git(gitdir, "show", f"{commit}:{path}")
        except UserError:
            continue
        d = path.rpartition("/")[0]
        extra, own = [], []
        for line in text.split("\n"):
            if line.strip().startswith("-r"):
                inc = f"{d}/{line[2:].strip()}" if d else line[2:].strip()
                extra += [x for x in _git(gitdir, "show", f"{commit}:{inc}").split("\n") if not skip(x)]
            elif not skip(line):
                own.append(line)
        return clean_requirements("\n".join([*extra, "\n".join(own)]))
    raise UserError(f"{repo}@{commit}: none of {MAP_REPO_TO_REQS_PATHS[repo]} exists")


def dockerfile(row: dict, specs: dict, pretend: str | None, has_reqs: bool) -> str:
    """The image as swebench's spec builds it (make_env_script_list / make_repo_script_list), with
    the repository from the shallow archive instead of a clone and pyenv's Python instead of conda."""
    env = "/opt/miniconda3/envs/testbed"
    act = ". /opt/miniconda3/bin/activate && conda activate testbed"
    lines = [
        f"# {row['instance_id']}: swebench 4.1.0 MAP_REPO_VERSION_TO_SPECS[{row['repo']!r}][{row['version']!r}]",
        "ARG BASE=sandbatch/base:bookworm", "FROM ${BASE}", "ARG PY",
        "COPY python/ /root/.pyenv/versions/${PY}/", "COPY _common/conda/ /opt/miniconda3/",
        "COPY ca.crt /etc/sandbatch-build-ca.crt",
        f"ENV PIP_CERT=/etc/sandbatch-build-ca.crt PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 "
        f"PATH={env}/bin:$PATH",
        f"RUN mkdir -p /opt/miniconda3/envs && ln -s /root/.pyenv/versions/${{PY}} {env} && "
        f"{env}/bin/python --version",
    ]
    if pretend:
        lines.append(f"ENV SETUPTOOLS_SCM_PRETEND_VERSION={pretend}")
    if has_reqs:
        lines += ["COPY requirements.txt /root/requirements.txt",
                  f"RUN {act} && python -m pip install -r /root/requirements.txt"]
    elif specs.get("packages") and specs["packages"] not in ("requirements.txt", "environment.yml"):
        lines.append(f"RUN {act} && python -m pip install {specs['packages']}")
    if specs.get("pip_packages"):
        lines.append(f"RUN {act} && python -m pip install {' '.join(shlex.quote(p) for p in specs['pip_packages'])}")
    lines += [
        f"COPY {ARCHIVE} /tmp/{ARCHIVE}",
        f"RUN mkdir -p /testbed && /usr/bin/python3 -m tarfile -e /tmp/{ARCHIVE} /testbed && rm /tmp/{ARCHIVE} && cd /testbed && "
        f"git checkout -qf {row['base_commit']} && git rev-parse HEAD && chmod -R 777 /testbed",
        "WORKDIR /testbed",
    ]
    for cmd in specs.get("pre_install") or []:
        lines.append(f"RUN {cmd}")
    if specs.get("install"):
        lines.append(f"RUN {act} && {specs['install']}")
    for cmd in specs.get("post_install") or []:
        lines.append(f"RUN {act} && {cmd}")
    lines.append("RUN git config --global user.email setup@swebench.config && git config --global user.name SWE-bench "
                 "&& git commit --allow-empty -qam SWE-bench")
    return "\n".join(lines) + "\n"


def new(gitdir: Path, instance_id: str, repo: str, base: str, fix: str, version: str, provenance: dict,
        problem_statement: str, extra: dict | None = None) -> Row:
    from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS

    specs = MAP_REPO_VERSION_TO_SPECS.get(repo, {}).get(version)
    if specs is None:
        raise UserError(f"swebench has no spec for {repo} {version}")
    d = ROOT / instance_id
    d.mkdir(parents=True, exist_ok=True)
    base = _git(gitdir, "rev-parse", f"{base}^{{commit}}").strip()
    fix = _git(gitdir, "rev-parse", f"{fix}^{{commit}}").strip()
    patch, test_patch = split_fix(gitdir, base, fix)
    shallow_archive(gitdir, base, d / ARCHIVE)
    has_reqs = specs.get("packages") == "requirements.txt"
    if has_reqs:
        (d / "requirements.txt").write_text(requirements(gitdir, base, repo) + "\n")
    data = {"instance_id": instance_id, "repo": repo, "base_commit": base, "version": version,
            "problem_statement": problem_statement, "patch": patch, "test_patch": test_patch,
            "FAIL_TO_PASS": [], "PASS_TO_PASS": [], **(extra or {}),
            "provenance": {**provenance, "fix_commit": fix},
            "source": {"kind": "git", "archive": ARCHIVE, "commit": base,
                       "how": "git fetch --depth 1 of the base commit from the public repository's history"},
            "env": {"python": specs.get("python"), "spec": specs}}
    (d / "Dockerfile").write_text(dockerfile(data, specs, scm_version(gitdir, base), has_reqs))
    row = Row(d, data)
    row.save()
    return row


def main_args(args) -> int:
    prov = {"upstream": args.upstream, "license": args.license, "row": args.row_source}
    ps = Path(args.problem_statement).read_text() if args.problem_statement else ""
    row = new(Path(args.mirror), args.instance_id, args.repo, args.base, args.fix, args.version, prov, ps,
              json.loads(args.extra) if args.extra else None)
    print(f"wrote {row.dir} (image {row.image()}); next: python -m sandbatch.corpus lists {row.id}")
    return 0
