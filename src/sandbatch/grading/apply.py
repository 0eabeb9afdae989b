"""Applying a patch inside a sandbox, with the fallbacks the SWE-bench graders use."""

from __future__ import annotations

import shlex

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
