"""Outcomes mean what the test says (docs/benchmarks.md, "Outcomes the test declares"): a decisive
test the log calls XFAIL (which swebench counts as passed) or SKIPPED (which it counts as neither,
and a group of neither as passed) keeps that outcome only when the test as placed declares it.
Whatever raised the expected failure or the skip (pytest.xfail, pytest.skip, unittest.SkipTest
raised by the code under test look the same to the runner), the grader reads the declaration
from the source of the restored test files, on the host, with the Python parser:

- the test function's decorators and body, its enclosing classes' decorators and their members
  that are not tests (setUp, fixtures, `pytestmark`), the module's statements that are not tests
  (`pytestmark`, fixtures, `setup_module`, module-level skips) and the conftest.py files above it;
- XFAIL is declared by a mention of `xfail` or `expectedFailure` there, SKIPPED by a mention of
  `skip` (skipif, importorskip, skipTest, skipUnless, Django's skipUnlessDBFeature...) or of a
  `requires...` decorator.

Otherwise the test counts as failed, tampering kind `outcome_undeclared`. A test the grader cannot
find in the sources declares nothing.
"""

from __future__ import annotations

import ast
import re
from pathlib import PurePosixPath

KIND = "outcome_undeclared"
_WORDS = {"XFAIL": re.compile(r"xfail|expectedfailure|expected_failure", re.I),
          "SKIPPED": re.compile(r"skip|\brequires?_\w|@requires?\b", re.I)}
_DJANGO = re.compile(r"^(\w+) \(([\w.]+)\)$")


def _is_test_def(node: ast.stmt) -> bool:
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test")


def _is_test_class(node: ast.stmt) -> bool:
    return isinstance(node, ast.ClassDef) and any(_is_test_def(n) for n in node.body)


# lines as the parser counts them (\r\n, \r or \n ends one; a form feed does not), ends kept
_LINES = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def segment(lines: list[str], node: ast.AST) -> str:
    """ast.get_source_segment(source, node) from the source's lines split once: it splits the whole
    source on every call, which over the tests of a long file (requests' 2,500 lines) cost seconds
    of a grade's CPU."""
    end, end_col = getattr(node, "end_lineno", None), getattr(node, "end_col_offset", None)
    if end is None or end_col is None:
        return ""
    first, col = node.lineno - 1, node.col_offset  # columns are offsets in UTF-8 bytes
    if first == end - 1:
        return lines[first].encode()[col:end_col].decode()
    return "".join([lines[first].encode()[col:].decode(), *lines[first + 1:end - 1],
                    lines[end - 1].encode()[:end_col].decode()])


class Sources:
    """The placed test files (path -> source) and conftest files, indexed by test on the first lookup:
    most grades have no decisive XFAIL or SKIPPED to look up, and parsing a long test file is most of
    what this check costs (requests' 2,500 lines: 0.07 s of the grading process's CPU)."""

    def __init__(self, files: dict[str, str]):
        self.files = files
        self._tests: dict[tuple[str, str], str] | None = None
        self.docs: dict[str, list[tuple[str, str]]] = {}  # a test docstring's first line -> tests

    @property
    def tests(self) -> dict[tuple[str, str], str]:
        """(file, qualname) -> the text that may declare the test's outcome."""
        if self._tests is None:
            self._tests = {}
            for path, src in self.files.items():
                if path.endswith(".py") and PurePosixPath(path).name != "conftest.py":
                    self._index(path, src, self._tests)
        return self._tests

    def _index(self, path: str, src: str, tests: dict[tuple[str, str], str]) -> None:
        try:
            tree = ast.parse(src)
        except (SyntaxError, ValueError):
            return
        lines = _LINES.findall(src)

        def seg(nodes) -> str:
            return "\n".join(segment(lines, n) for n in nodes)

        module = seg([n for n in tree.body if not _is_test_def(n) and not _is_test_class(n)])
        base = module + "\n" + self._conftests(path)

        def walk(body, prefix: str, around: str) -> None:
            for node in body:
                if isinstance(node, ast.ClassDef):
                    own = seg(node.decorator_list) + "\n" + seg(
                        [n for n in node.body if not _is_test_def(n) and not isinstance(n, ast.ClassDef)])
                    walk(node.body, f"{prefix}{node.name}.", around + "\n" + own)
                elif _is_test_def(node):
                    qual = prefix + node.name
                    tests[(path, qual)] = around + "\n" + seg([*node.decorator_list, node])
                    doc = ast.get_docstring(node)
                    if doc:
                        self.docs.setdefault(doc.strip().split("\n")[0].strip(), []).append((path, qual))

        walk(tree.body, "", base)

    def _conftests(self, path: str) -> str:
        parts = PurePosixPath(path).parts[:-1]
        return "\n".join(self.files.get(str(PurePosixPath(*parts[:i], "conftest.py")), "")
                         for i in range(len(parts) + 1))

    def find(self, test: str) -> str | None:
        """The text that may declare a test's outcome, by its name as the log parser reads it."""
        if "::" in test:  # pytest's node id: file::Class::name[params]
            file, *rest = test.split("::")
            return self.tests.get((file, ".".join(rest).split("[")[0]))
        m = _DJANGO.match(test)
        if m:  # unittest's "name (module.Class)" or "name (module.Class.name)"
            name, dotted = m.group(1), m.group(2).split(".")
            if dotted[-1] == name:
                dotted = dotted[:-1]
            for (file, qual), text in self.tests.items():
                mod = file[:-3].replace("/", ".")
                for k in range(1, len(dotted)):
                    if (mod == ".".join(dotted[:k]) or mod.endswith("." + ".".join(dotted[:k]))) and \
                            qual == ".".join([*dotted[k:], name]):
                        return text
            return None
        tests = self.tests  # (the docstrings are indexed with them)
        found = self.docs.get(test.strip(), [])
        return tests[found[0]] if len(found) == 1 else None


def check(status: dict[str, str], decisive: set[str], sources: Sources | None) -> list[dict[str, str]]:
    """Tampering entries for the decisive tests whose XFAIL or SKIPPED the test does not declare; those
    tests are set to FAILED in `status`. sources None: the placed files were not read (no check)."""
    if sources is None:
        return []
    out = []
    for t in sorted(decisive):
        s = status.get(t)
        if s not in _WORDS:
            continue
        text = sources.find(t)
        if text is not None and _WORDS[s].search(text):
            continue
        why = "the test is not found in the placed test files" if text is None else \
            "the test as placed declares no such outcome"
        out.append({"path": t, "kind": KIND, "action": "counted_failed", "detail": f"the log says {s}: {why}"})
        status[t] = "FAILED"
    return out
