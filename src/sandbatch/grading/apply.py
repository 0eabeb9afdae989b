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


def apply_script(patch_path: str) -> str:
    """A shell snippet that applies the patch and prints `SANDBATCH_APPLIED=<method>`, or exits 1."""
    p = shlex.quote(patch_path)
    parts = [f"if {cmd.format(p=p)}; then echo {MARK}{name}; exit 0; fi; git checkout -q -- . 2>/dev/null;"
             for name, cmd in APPLY_METHODS]
    return " ".join(parts) + " exit 1"


def applied_method(stdout: str) -> str | None:
    for line in stdout.splitlines():
        if line.startswith(MARK):
            return line[len(MARK):].strip()
    return None
