"""`sandbatch compare`: constructed runs whose statistics are known, and the report page."""

import json
import math

import pytest

from ops_util import run, sandbatch
from sandbatch.contracts.row import RolloutRow
from sandbatch.reporting.compare import Run, compare, mcnemar_exact, outcomes


def write_run(root, name, tasks, threshold=1.0):
    """tasks: instance_id -> list of resolved flags, one per repeat."""
    d = root / "results" / name
    d.mkdir(parents=True)
    rows = [{"run": d.name, "task_id": t, "instance_id": t, "repeat": r, "resolved": ok, "reward": float(ok)}
            for t, flags in tasks.items() for r, ok in enumerate(flags)]
    (d / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "metrics.json").write_text(json.dumps({"reward_threshold": threshold}))
    return d


def make(name, tasks):
    rows = [RolloutRow(run=name, task_id=t, instance_id=t, repeat=r, resolved=ok, reward=float(ok))
            for t, flags in tasks.items() for r, ok in enumerate(flags)]
    return Run(name, 1.0, outcomes(rows, 1.0))


@pytest.mark.parametrize("b,c,p", [(0, 0, 1.0), (0, 6, 2 / 64), (1, 9, 2 * 11 / 1024), (5, 5, 1.0),
                                   (3, 10, 2 * (1 + 13 + 78 + 286) / 2 ** 13)])
def test_mcnemar_exact_is_the_binomial_tail(b, c, p):
    assert mcnemar_exact(b, c) == pytest.approx(p)
    assert mcnemar_exact(c, b) == pytest.approx(p)


def test_known_rates_flips_and_p_value():
    # 20 tasks, one repeat: A resolves t0..t9, B resolves t4..t15: B lost 4 and gained 6
    a = make("a", {f"t{i}": [i < 10] for i in range(20)})
    b = make("b", {f"t{i}": [4 <= i < 16] for i in range(20)})
    c = compare(a, b)
    assert c["tasks"] == 20 and c["repeats_min"] == 1
    m = c["metrics"]["resolved"]
    assert (m["a"], m["b"], m["diff"]) == (0.5, 0.6, pytest.approx(0.1))
    assert m["a_ci"][0] < 0.5 < m["a_ci"][1] and m["diff_ci"][0] < 0.1 < m["diff_ci"][1]
    assert c["flips"] == {"a_to_b_lost": ["t0", "t1", "t2", "t3"],
                          "a_to_b_gained": ["t10", "t11", "t12", "t13", "t14", "t15"]}
    assert c["mcnemar"]["p_value"] == pytest.approx(mcnemar_exact(4, 6)) == pytest.approx(2 * (1 + 10 + 45 + 120 + 210) / 1024)
    assert c["mcnemar"]["resolved_both"] == 6 and c["mcnemar"]["resolved_neither"] == 4
    assert c["flaky"] == {"a": [], "b": []}


def test_bootstrap_interval_matches_the_normal_approximation():
    # 400 tasks, half resolved: the 95% interval is about 0.5 +- 1.96 * sqrt(0.25 / 400) = +-0.049
    a = make("a", {f"t{i:03d}": [i % 2 == 0] for i in range(400)})
    b = make("b", {f"t{i:03d}": [True] for i in range(400)})
    c = compare(a, b, n_boot=4000)
    half = 1.96 * math.sqrt(0.25 / 400)
    lo, hi = c["metrics"]["resolved"]["a_ci"]
    assert lo == pytest.approx(0.5 - half, abs=0.01) and hi == pytest.approx(0.5 + half, abs=0.01)
    assert c["metrics"]["resolved"]["b_ci"] == [1.0, 1.0]  # no spread, no interval
    # the difference is bootstrapped over the same tasks: 1 - a_i, so its interval mirrors A's
    dlo, dhi = c["metrics"]["resolved"]["diff_ci"]
    assert dlo == pytest.approx(1 - hi, abs=0.005) and dhi == pytest.approx(1 - lo, abs=0.005)
    assert c["mcnemar"]["resolved_b_only"] == 200 and c["mcnemar"]["p_value"] < 1e-50


def test_pass_at_k_and_flaky_tasks_with_repeats():
    a = make("a", {"x": [True, False, False, False], "y": [False] * 4})
    b = make("b", {"x": [True] * 4, "y": [True, True, True, False], "z": [True] * 4})  # z: only in B
    c = compare(a, b)
    assert c["tasks"] == 2 and c["only_in_b"] == ["z"] and c["repeats_min"] == 4
    assert list(c["metrics"]) == ["resolved", "pass@1", "pass@2", "pass@3", "pass@4"]
    # x in A: 1 of 4 correct: pass@1 0.25, pass@2 1 - C(3,2)/C(4,2) = 0.5, pass@3 1 - C(3,3)/C(4,3)
    # = 0.75, pass@4 1; y: 0
    assert c["metrics"]["pass@1"]["a"] == pytest.approx(0.125)
    assert c["metrics"]["pass@2"]["a"] == pytest.approx(0.25)
    assert c["metrics"]["pass@3"]["a"] == pytest.approx(0.375)
    assert c["metrics"]["pass@4"]["a"] == pytest.approx(0.5)
    assert c["metrics"]["pass@1"]["b"] == pytest.approx((1 + 0.75) / 2)
    assert c["flaky"] == {"a": ["x"], "b": ["y"]}
    # resolved by most repeats: x by B only (1 of 4 in A), y by B only (3 of 4)
    assert c["flips"]["a_to_b_gained"] == ["x", "y"] and c["mcnemar"]["p_value"] == 0.5


def test_cli_text_json_and_errors(tmp_path):
    write_run(tmp_path, "base", {f"t{i}": [i < 3, i < 2] for i in range(8)})
    write_run(tmp_path, "new", {f"t{i}": [i < 7, i < 7] for i in range(8)})
    out = sandbatch("compare", "base", "new", "-d", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "8 tasks in both runs, >= 2 repeat(s) each" in out.stdout
    assert "resolved  31.2% [" in out.stdout
    assert "gained by B (5): t2, t3, t4, t5, t6" in out.stdout  # t2: 1 of 2 in base is not most
    assert "flaky in A (1): t2" in out.stdout
    js = sandbatch("compare", "base", "new", "-d", str(tmp_path), "--json", "--html", str(tmp_path / "c.html"))
    c = json.loads(js.stdout)
    assert c["metrics"]["resolved"]["a"] == pytest.approx(5 / 16) and c["metrics"]["resolved"]["b"] == 7 / 8
    assert c["mcnemar"]["p_value"] == pytest.approx(2 / 32)
    assert "<li>t6</li>" in (tmp_path / "c.html").read_text()
    bad = sandbatch("compare", "base", "nosuch", "-d", str(tmp_path))
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().endswith("not found; compare needs finished runs (their aggregate step writes it)")


@pytest.mark.slow
def test_report_compares_with_the_run_named_in_compare_to(tmp_path):
    none = run(tmp_path, "--config", "benchmark={'limit': 3}", "run=floor", "harness={'name': 'none'}")
    assert none.returncode == 0, none.stderr[-3000:]
    args = ["--config", "benchmark={'limit': 3}", "run=gold", "aggregate={'compare_to': 'floor'}"]
    gold = run(tmp_path, *args)
    assert gold.returncode == 0, gold.stderr[-3000:]
    page = (tmp_path / "results" / "gold" / "report" / "compare.html").read_text()
    assert "Run gold (B) against floor (A)" in page
    assert "A only 0,\nB only 3, both 0, neither 0; p = 0.25" in page
    assert page.count("<li>smoke__") == 3  # the three gained tasks
    rep = run(tmp_path, *args, "--report", "report.html")
    assert rep.returncode == 0, rep.stderr[-3000:]
    assert "compare.html" in (tmp_path / "report.html").read_text()
