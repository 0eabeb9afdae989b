"""Applying a patch inside a sandbox, with the fallbacks the graders (and the oracle) use."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.errors import InfraError
from ..core.failures import FailureClass
from . import suspicion, tamper, workdir_reads
from .result import Findings, GradeResult, Stop, decide, restored_error
from .tamper import save_untracked, untracked_backup

if TYPE_CHECKING:
    from typing import Mapping

    from . import GradeContext
    from ..sandbox import Sandbox

# tried in order; the first that succeeds wins
APPLY_METHODS = (
    ("git_apply", "git apply --verbose {p}"),
    ("git_apply_reject", "git apply --verbose --reject {p}"),
    ("patch_fuzz", "patch --batch --fuzz=5 -p1 -i {p}"),
)

MARK = "SANDBATCH_APPLIED="
# a failed attempt (notably --reject) leaves partial state: start the next one from a clean tree
_RESET = "git checkout -q -- . 2>/dev/null; git clean -fdq 2>/dev/null;"


def apply_script(patch_path: str) -> str:
    """A shell snippet that applies the patch and prints `SANDBATCH_APPLIED=<method>`, or exits 1.

    After the last method fails, a patch that is already fully applied (the fallbacks can
    leave it so while each still exits non-zero) counts as applied.
    """
    p = shlex.quote(patch_path)
    parts = []
    for i, (name, cmd) in enumerate(APPLY_METHODS):
        parts.append(f"{_RESET if i else ''} if {cmd.format(p=p)}; then echo {MARK}{name}; exit 0; fi;")
    parts.append(f"if git apply --check --reverse {p} 2>/dev/null; then echo {MARK}already_applied; exit 0; fi;")
    parts.append(f"{_RESET} exit 1")
    return " ".join(parts)


def applied_method(stdout: str) -> str | None:
    for line in stdout.splitlines():
        if line.startswith(MARK):
            return line[len(MARK):].strip()
    return None


@dataclass
class Applied:
    ok: bool
    snap: str = ""  # tamper.snapshot's answer, when asked for: taken in the same exec, before the patch

    def __bool__(self) -> bool:
        return self.ok


async def apply_patch(sandbox: "Sandbox", patch: str, path: str, result: GradeResult, log: list[str],
                      timeout: float, cwd: str | None = None, label: str = "$ apply model patch",
                      also: "Mapping[str, tuple[bytes, int]] | None" = None, snapshot: str | None = None) -> Applied:
    """Upload `patch` to `path` in the sandbox (with `also`, the grade's other files, in the same
    upload) and apply it with the fallbacks, logging under `label`; snapshot: take tamper.snapshot
    first, in the same exec, `snapshot` being its fallback.

    Notes the method in `result`; when no method applies, its stop (patch_apply_failed): the grader
    returns it.
    """
    await sandbox.upload_files({path: (patch.encode("utf-8", "surrogateescape"), 0o644), **(also or {})})
    save = save_untracked(patch, untracked_backup(sandbox))  # what restore puts back of the image's own files
    snap = f"{tamper.SNAPSHOT}; " if snapshot is not None else ""
    applied = await sandbox.exec(snap + save + " " + apply_script(path), timeout=timeout, cwd=cwd)
    out = applied.stdout
    taken = tamper.snapshot_taken(out, snapshot) if snapshot is not None else ""
    if snapshot is not None:  # the stash line is the snapshot's, not the apply's
        out = "\n".join(ln for ln in out.split("\n") if not ln.startswith(tamper.SNAPSHOT_MARK))
    log += [label, out, applied.stderr]
    result.apply_method = applied_method(out)
    result.patch_applied = result.apply_method is not None
    if not result.patch_applied and not (out.strip() or applied.stderr.strip()):
        # every method that fails says why: a failure that printed nothing is the exec's, not the patch's
        raise InfraError(f"applying the patch printed nothing and exited {applied.exit_code}",
                         FailureClass.SANDBOX_EXEC)
    if not result.patch_applied:
        result.stop = Stop(FailureClass.PATCH_APPLY_FAILED)
    return Applied(result.patch_applied, taken)


async def keep_code_only(g: "GradeContext", result: GradeResult, snap: str, cwd: str | None = None,
                         tools_only: bool = False) -> bool:
    """After the patch is applied: put back what it may not change as `snap` (tamper.snapshot, taken
    before) has it (the restore's findings), and list the code that reaches into the test runner in
    result.suspicious; False when grading stops here (the findings decide a tampered grade: result is
    then final). tools_only: only what stands in for the test tools (Terminal-Bench), no scan."""
    if g.cfg.grading.tampering == "log_only":  # graded as the benchmark's own harness would
        return True
    cwd = cwd or g.sandbox.workdir
    test_files = tamper.task_test_files(g.task)
    known = workdir_reads.Reads(g.sandbox, cwd, g.timeout)  # what both checks read, in one exec
    await known.prefetch([*tamper.reads_wanted(g.patch, snap),
                          *([] if tools_only else suspicion.reads_wanted(g.patch, test_files))])
    findings = await tamper.find(g.sandbox, g.patch, snap, cwd, g.timeout, test_files, tools_only=tools_only,
                                 known=known)
    await tamper.restore(g.sandbox, findings, snap, cwd, g.timeout, g.log)
    entries = tuple(f.as_dict() for f in findings)
    result.found(Findings(entries=entries, tampered=restored_error(entries)))
    if decide(result, g.cfg.grading).status == "tampered":
        return False
    if tools_only:  # Terminal-Bench: the workdir is the answer, whatever its code does
        return True
    result.suspicious = await suspicion.find(known, g.patch, test_files, frozenset(f.path for f in findings))
    if result.suspicious:
        g.log += ["$ suspicious lines of the patch", *(f"{s['path']}:{s['line']}: {s['reason']}: {s['text']}"
                                                     for s in result.suspicious)]
    return decide(result, g.cfg.grading).status != "tampered"
