"""FAIL_TO_PASS / PASS_TO_PASS the way SWE-bench computed them: in the row's image, swebench's
eval script for the repository and version (make_eval_script_list, through the grader's
own plan) runs once on the base commit and once with the gold patch applied; swebench's
get_logs_eval reads each log with the repository's parser (MAP_REPO_TO_PARSER). A test
that passes after and not before is FAIL_TO_PASS, one that passes in both PASS_TO_PASS;
whatever the parser reads as a test name is kept (its artifacts too, such as `[100%]` from
pytest's nested output), as it is in the published lists.

Also made here: the row's `noop_patch`, a comment added at the top of the first file the
gold patch changes (in the image's own checkout, so it applies exactly).
"""

from __future__ import annotations

import hashlib
import shlex
import subprocess
import tempfile
from pathlib import Path

from ..core.errors import InfraError
from ..core.failures import FailureClass
from ..grading.swebench import HEREDOC, plan
from ..tasks.swebench import _task as make_task
from . import Row, store
from .build import build
from .pro import compute as compute_pro

COMMENT = {".py": "#", ".pyx": "#", ".js": "//", ".ts": "//", ".jsx": "//", ".tsx": "//", ".go": "//",
           ".rs": "//", ".java": "//", ".c": "//", ".h": "//", ".cpp": "//", ".php": "//", ".rb": "#"}


def _run(image: str, script: str, timeout: float, docker: str = "docker") -> str:
    # the script is a file, as the grader runs it: fed on stdin (`bash -s`), a command that reads
    # stdin (npm run-s) would swallow the rest of the script
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "eval.sh"
        path.write_text(script, encoding="utf-8")
        proc = subprocess.run([docker, "run", "--rm", "--network", "none", "-v", f"{path}:/tmp/eval.sh:ro", image,
                               "bash", "/tmp/eval.sh"], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout)
    return proc.stdout + proc.stderr


def _task(row: Row):
    return make_task(row.task(), row.dir / "row.json", str(row.dir / "row.json"))


def statuses(row: Row, image: str, gold: bool, timeout: float) -> tuple[dict[str, str], str]:
    """(the parser's status per test, the log) of one run of the eval script, with or without the gold patch."""
    from swebench.harness.grading import get_logs_eval

    p = plan(_task(row), "/testbed", row.data["base_commit"])
    script = p.script
    if gold:
        apply = f"cd /testbed && git apply -v - <<'{HEREDOC}'\n{row.data['patch']}\n{HEREDOC}\n"
        script = script.replace("set -uxo pipefail\n", f"set -uxo pipefail\n{apply}", 1)
    log = _run(image, script, timeout)
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as fh:
        fh.write(log)
    status, found = get_logs_eval(p.test_spec, fh.name)
    Path(fh.name).unlink()
    if not found:
        raise InfraError(f"{row.id}: swebench's get_logs_eval found no test output "
                         f"({'gold' if gold else 'base'} run):\n{log[-2000:]}", FailureClass.CORPUS_LISTS)
    return status, log


def noop_patch(row: Row, image: str) -> str:
    from swebench.harness.utils import get_modified_files

    path = get_modified_files(row.data["patch"])[0]
    mark = COMMENT.get(Path(path).suffix, "#")
    q = shlex.quote(path)
    script = (f"cd /testbed && sed -i '1i {mark} A comment that changes nothing.' {q} && "
              f"git -c core.fileMode=false diff -- {q}")
    out = _run(image, script, 300)
    if not out.startswith("diff --git"):
        raise InfraError(f"{row.id}: could not make the comment-only patch: {out[-500:]}", FailureClass.CORPUS_LISTS)
    return out


def compute(row: Row, timeout: float = 3600) -> dict:
    """Set the row's FAIL_TO_PASS, PASS_TO_PASS and noop_patch; return what lists.json records."""
    if row.kind == "swebench_pro":  # the Pro evaluation's own run_script and parser decide
        return compute_pro(row, timeout)
    from importlib.metadata import version

    from swebench.harness.log_parsers import MAP_REPO_TO_PARSER
    from swebench.harness.grading import test_passed

    image, _ = build(row)
    before, log_before = statuses(row, image, False, timeout)
    after, log_after = statuses(row, image, True, timeout)
    f2p, p2p = store(row, before, after, lambda s, t: test_passed(t, s), noop_patch(row, image))
    return {"swebench": version("swebench"), "parser": MAP_REPO_TO_PARSER[row.data["repo"]].__name__,
            "image": image, "how": __doc__.split("\n\n")[0].replace("\n", " "),
            "before": before, "after": after,
            "log_sha256": {"before": hashlib.sha256(log_before.encode()).hexdigest(),
                           "after": hashlib.sha256(log_after.encode()).hexdigest()},
            "counts": {"FAIL_TO_PASS": len(f2p), "PASS_TO_PASS": len(p2p)}}
