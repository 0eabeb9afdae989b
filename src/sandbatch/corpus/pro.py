"""SWE-bench Pro rows of the corpus (row.json `kind: swebench_pro`): the row as a Pro task on its
image, and FAIL_TO_PASS / PASS_TO_PASS the way SWE-bench Pro computes them: in the row's image,
the last line of before_repo_set_cmd (it puts the graded test files in place), then the
instance's own `run_script.sh <selected test files>` and `parser.py`, once on the base commit
and once with the gold patch applied. A test PASSED after and not before is FAIL_TO_PASS, one
PASSED in both is PASS_TO_PASS.

(The first paragraph is what lists.json records as `how`. The row as a Pro task is
`Row.task`, corpus/__init__.py.)
"""

from __future__ import annotations

import base64
import shlex
import subprocess

from ..core.errors import InfraError
from ..core.failures import FailureClass
from ..grading.swebench_pro import last_command, parse_output
from . import Row, store
from .build import build

WORKDIR = "/app"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def statuses(row: Row, image: str, gold: bool, timeout: float, docker: str = "docker") -> tuple[dict[str, str], str]:
    d = row.data
    steps = [f"cd {WORKDIR}"]
    if gold:
        steps.append(f"printf %s {_b64(d['patch'])} | base64 -d | git apply -v -")
    files = shlex.quote(",".join(d["selected_test_files_to_run"]))
    steps += [last_command(d["before_repo_set_cmd"]),
              f"printf %s {_b64(row.file('run_script.sh'))} | base64 -d > /tmp/run_script.sh",
              f"printf %s {_b64(row.file('parser.py'))} | base64 -d > /tmp/parser.py",
              f"bash /tmp/run_script.sh {files} > /tmp/stdout.log 2> /tmp/stderr.log",
              "python /tmp/parser.py /tmp/stdout.log /tmp/stderr.log /tmp/output.json >&2",
              "cat /tmp/stdout.log >&2", "echo @@OUTPUT@@", "cat /tmp/output.json"]
    proc = subprocess.run([docker, "run", "--rm", "-i", "--network", "none", "--entrypoint", "bash", image, "-s"],
                          input="\n".join(steps) + "\n", capture_output=True, text=True, timeout=timeout)
    out = proc.stdout.split("@@OUTPUT@@\n", 1)
    status = parse_output(out[1].encode()) if len(out) == 2 else None
    if not status:
        raise InfraError(f"{row.id}: run_script/parser gave no results ({'gold' if gold else 'base'} run):\n"
                         f"{proc.stderr[-2000:]}", FailureClass.CORPUS_LISTS)
    return status, proc.stderr


def compute(row: Row, timeout: float = 3600) -> dict:
    """Set the row's FAIL_TO_PASS, PASS_TO_PASS and noop_patch; return what lists.json records."""
    image, _ = build(row)
    before, _ = statuses(row, image, False, timeout)
    after, _ = statuses(row, image, True, timeout)
    # the Pro evaluation's criterion: PASSED in parser.py's output
    f2p, p2p = store(row, before, after, lambda s, t: s.get(t) == "PASSED", noop_patch(row, image))
    return {"how": __doc__.split("\n\n")[0].replace("\n", " "), "parser": "parser.py (the instance's own)",
            "image": image, "before": before, "after": after,
            "counts": {"FAIL_TO_PASS": len(f2p), "PASS_TO_PASS": len(p2p)}}


def noop_patch(row: Row, image: str, docker: str = "docker") -> str:
    from swebench.harness.utils import get_modified_files

    path = shlex.quote(get_modified_files(row.data["patch"])[0])
    script = (f"cd {WORKDIR} && sed -i '1i # A comment that changes nothing.' {path} && "
              f"git -c core.fileMode=false diff -- {path}")
    proc = subprocess.run([docker, "run", "--rm", "--entrypoint", "bash", image, "-c", script],
                          capture_output=True, text=True, timeout=300)
    if not proc.stdout.startswith("diff --git"):
        raise InfraError(f"{row.id}: could not make the comment-only patch: {proc.stderr[-500:]}",
                         FailureClass.CORPUS_LISTS)
    return proc.stdout
