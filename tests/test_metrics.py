import math

import pytest

from sandbatch.contracts.metrics import Rate
from sandbatch.contracts.row import RolloutRow
from sandbatch.reporting.metrics import compute, ks_for, pass_at_k, percentile


def brute(n, c, k):
    return 1 - math.comb(n - c, k) / math.comb(n, k)


@pytest.mark.parametrize("n,c,k,expected", [
    (1, 1, 1, 1.0), (1, 0, 1, 0.0),
    (3, 1, 1, 1 / 3), (3, 1, 2, 2 / 3), (4, 2, 2, 5 / 6),
    (5, 4, 2, 1.0),  # n - c = 1 < k: every pair has a correct sample
    (10, 3, 4, 1 - 35 / 210),
])
def test_pass_at_k_hand_computed(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_matches_binomials_and_is_stable_for_large_n():
    for n in range(1, 12):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(brute(n, c, k), abs=1e-12)
    assert 0 < pass_at_k(2000, 1, 1000) <= 1


def test_pass_at_k_rejects_impossible_counts():
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)


def test_ks_and_percentiles():
    assert ks_for(1) == [1]
    assert ks_for(3) == [1, 2, 3]
    assert ks_for(6) == [1, 2, 3, 4, 5, 6]
    assert ks_for(0) == []
    assert percentile([3, 1, 2], 50) == 2
    assert percentile([1, 2, 3, 4], 95) == pytest.approx(3.85)
    assert percentile([], 50) is None


def _row(iid, reward, status="ok", fc=None):
    return RolloutRow(run="r", task_id=iid, instance_id=iid, repeat=0, reward=reward, resolved=reward >= 1,
                      status=status, failure_class=fc, patch_empty=False, durations={"grade": 1.0},
                      usage={"total_tokens": 10, "input_tokens": 7, "output_tokens": 3})


def test_compute_separates_infra_errors_and_states_denominators():
    rows = [_row("a", 1), _row("a", 0), _row("b", 0, "infra_error", "sandbox_create"), _row("b", 1)]
    m = compute(rows, 1.0)
    # the infra error is no sample: b has one (resolved), a two (one resolved)
    assert m.pass_at_k == {"1": 75.0} and m.samples_per_task_min == 1
    assert m.mean_reward == pytest.approx(2 / 3)  # over the graded three
    assert m.resolved_rate == Rate(value=0.5, numerator=2, denominator=4)
    assert m.resolved_rate_excluding_infra_errors.denominator == 3
    assert m.failure_classes == {"sandbox_create": 1}
    assert m.tokens.total == 40
