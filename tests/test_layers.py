"""The packages' layers and the absence of import circles, as pyproject.toml's
[tool.importlinter] contracts state them (README.md, "Layout"), checked by import-linter's CLI."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept():
    lint = Path(sys.executable).with_name("lint-imports")
    out = subprocess.run([str(lint), "--no-cache", "--no-logo"], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "2 kept, 0 broken" in out.stdout, out.stdout[-2000:]


def _named(tree, names: set[str]):
    """Where code tells one of `names` apart: compared with it, or keyed by it."""
    import ast

    def consts(node):
        elts = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
        return [e for e in elts if isinstance(e, ast.Constant) and e.value in names]

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                yield from consts(side)
        elif isinstance(node, ast.Dict):
            yield from (k for k in node.keys if k is not None and consts(k))


def test_only_the_provider_and_harness_packages_know_their_names():
    """A new provider or harness is one module and one registry line: nothing outside sandbox/
    tells providers apart by name, nothing outside harness/ harnesses (it asks their classes)."""
    import ast

    from sandbatch.harness import HARNESSES
    from sandbatch.sandbox import PROVIDERS

    src = ROOT / "src" / "sandbatch"
    found = []
    for path in sorted(src.rglob("*.py")):
        package = path.relative_to(src).parts[0]
        names = ((set() if package == "sandbox" else set(PROVIDERS))
                 | (set() if package == "harness" else set(HARNESSES)))
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found += [f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}" for node in _named(tree, names)]
    assert not found, "\n".join(found)
