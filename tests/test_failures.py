"""Failure classes in one place: every class the code gives a record or an error is a member of
sandbatch.core.failures.FailureClass (never a loose string), and docs/outputs.md lists them all."""

import ast
from pathlib import Path

from sandbatch.core.failures import FailureClass, FailureKind, docs_table

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "sandbatch"
# the calls whose second argument is a failure class
CLASS_ARG = {"InfraError", "SandboxError", "_api_error"}
CLASS_NAMES = {"failure_class", "failure", "endpoint_failure"}


def _name(node: ast.AST) -> str:
    return getattr(node, "attr", getattr(node, "id", ""))


def _class_positions(tree: ast.AST):
    """The expressions that give a failure class: an error's class argument, a failure_class=
    keyword, an assignment to a failure_class, a parameter's default, a comparison with one."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            if _name(node.func) in CLASS_ARG and len(node.args) >= 2:
                yield node.args[1]
            yield from (kw.value for kw in node.keywords if kw.arg in CLASS_NAMES)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    yield from (v for t, v in zip(target.elts, node.value.elts) if _name(t) in CLASS_NAMES)
                elif _name(target) in CLASS_NAMES:
                    yield node.value
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args.args[len(node.args.args) - len(node.args.defaults):]
            yield from (d for a, d in zip(args, node.args.defaults) if a.arg in CLASS_NAMES)
        elif isinstance(node, ast.Compare) and _name(node.left) in CLASS_NAMES:
            yield from node.comparators


def _literals(expr: ast.AST):
    """The string constants an expression can evaluate to (not the keys it looks up)."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        yield expr
    elif isinstance(expr, (ast.Tuple, ast.List)):
        for elt in expr.elts:
            yield from _literals(elt)
    elif isinstance(expr, ast.Dict):
        for value in expr.values:
            yield from _literals(value)
    elif isinstance(expr, ast.IfExp):
        yield from _literals(expr.body)
        yield from _literals(expr.orelse)
    elif isinstance(expr, ast.BoolOp):
        for value in expr.values:
            yield from _literals(value)


def test_every_failure_class_in_the_code_is_a_member():
    loose, unknown, used = [], [], set()
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        where = path.relative_to(ROOT)
        for expr in _class_positions(tree):
            loose += [f"{where}:{node.lineno}: {node.value!r}" for node in _literals(expr)]
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _name(node.value) == "FailureClass" and node.attr.isupper():
                used.add(node.attr)
                if node.attr not in FailureClass.__members__:
                    unknown.append(f"{where}:{node.lineno}: FailureClass.{node.attr}")
    assert not loose, "failure classes given as strings, not FailureClass members:\n" + "\n".join(loose)
    assert not unknown, "\n".join(unknown)
    # a member the code never names is one the list should lose
    assert set(FailureClass.__members__) - used == set()


def test_every_member_has_a_meaning_and_a_kind_and_the_docs_list_them():
    for member in FailureClass:
        assert member.meaning and isinstance(member.kind, FailureKind), member
        assert member == member.value and FailureClass(member.value) is member
    assert {m for m in FailureClass if m.infra} == {m for m in FailureClass
                                                    if m.kind in (FailureKind.INFRA, FailureKind.MODEL)}
    assert FailureClass.MODEL_AUTH.infra and not FailureClass.TESTS_TIMEOUT.infra
    docs = (ROOT / "docs" / "outputs.md").read_text(encoding="utf-8")
    start = docs.index("<!-- failure classes: generated from sandbatch.core.failures -->\n")
    end = docs.index("\n<!-- end of failure classes -->")
    listed = docs[docs.index("\n", start) + 1:end]
    assert listed == docs_table(), "docs/outputs.md's table of failure classes is stale: print(docs_table())"
