"""Run-level metrics: pass@k (unbiased estimator), resolved rate, error rates, timings, tokens."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import Any, Iterable

from ..contracts.metrics import Cost, Metrics, Percentiles, Rate, TimeSpent, TokenData, Tokens
from ..contracts.response import TokenJoin
from ..contracts.row import RolloutRow


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples out of n (c correct) is correct.

    1 - C(n-c, k) / C(n, k), in the product form that never builds large binomials.
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def ks_for(n_min: int) -> list[int]:
    """Every k from 1 up to the smallest number of samples per task (beyond it the estimator
    has no samples to draw from)."""
    return list(range(1, n_min + 1))


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0..100); None for no values."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


PHASES = ("sandbox", "install", "agent", "harness", "patch", "grade")


def compute(rollouts: Iterable[RolloutRow], threshold: float, prices: Any = None) -> Metrics:
    """Metrics over rollout rows (contracts.row.RolloutRow); `prices`: model.prices, for the cost."""
    rows = list(rollouts)
    by_task: dict[str, list[RolloutRow]] = defaultdict(list)
    for r in rows:
        by_task[r.instance_id].append(r)
    # pass@k over the graded samples: an infrastructure failure is no sample of the agent
    graded_by_task = {t: g for t, v in by_task.items() if (g := [r for r in v if not r.infra_error])}
    n_min = min((len(v) for v in graded_by_task.values()), default=0)
    pass_k = {}
    for k in ks_for(n_min):
        vals = [pass_at_k(len(v), sum(1 for r in v if (r.reward or 0) >= threshold), k)
                for v in graded_by_task.values()]
        pass_k[str(k)] = round(100 * sum(vals) / len(vals), 4)

    resolved = sum(1 for r in rows if r.resolved)
    infra = [r for r in rows if r.infra_error]
    graded = len(rows) - len(infra)
    durations = {p: [v for r in rows if (v := getattr(r.durations, p)) is not None] for p in PHASES}
    tokens = [r.total_tokens for r in rows]
    joins = [r.token_join for r in rows if r.token_join]
    io_tokens = Tokens(total=sum(tokens), mean_per_rollout=round(sum(tokens) / len(tokens), 1) if tokens else 0,
                       input=sum(r.usage.input_tokens for r in rows), output=sum(r.usage.output_tokens for r in rows))
    return Metrics(
        tasks=len(by_task),
        rollouts=len(rows),
        samples_per_task_min=n_min,
        reward_threshold=threshold,
        pass_at_k=pass_k,
        resolved=resolved,
        resolved_rate=_rate(resolved, len(rows)),
        resolved_rate_excluding_infra_errors=_rate(resolved, graded),
        # over the graded rollouts, as Gym's profile takes it: an infrastructure failure earns no 0
        mean_reward=round(sum((r.reward or 0) for r in rows if not r.infra_error) / graded, 6) if graded else None,
        status_counts=dict(Counter(r.status for r in rows)),
        failure_classes=dict(Counter(r.failure_class for r in rows if r.failure_class)),
        infra_error_rate=_rate(len(infra), len(rows)),
        infra_error_classes=dict(Counter(r.failure_class or "unknown" for r in infra)),
        empty_patches=sum(1 for r in rows if r.patch_empty),
        # rollouts whose patch changed what grades it (neutralised or failed, grading.tampering)
        tampering_rate=_rate(sum(1 for r in rows if r.tampering), len(rows)),
        # rollouts whose code reaches into the test runner (grading.suspicion), and which
        suspicious_rate=_rate(len(suspicious_rollouts(rows)), len(rows)),
        suspicious_rollouts=suspicious_rollouts(rows),
        durations_s={p: Percentiles(p50=_round(percentile(v, 50)), p95=_round(percentile(v, 95)))
                     for p, v in durations.items()},
        tokens=io_tokens,
        token_data=token_data(joins),
        # spans a trace collector did not take in time (traces.exporters); the rollouts ran on
        traces_dropped=sum(r.traces_dropped for r in rows),
        time_s=time_by_kind(rows),
        cost=cost(io_tokens, prices, len(rows)),
    )


def time_by_kind(rows: list[RolloutRow]) -> TimeSpent:
    """Where the rollouts' time went, summed (seconds): from their traces when they have them
    (traces.exporters with `file`: each instant once, gaps between steps as orchestration),
    else from their step records (`source: records`), as every run has them."""
    traced = [r.time_by_kind for r in rows if r.time_by_kind]
    if not traced:
        return time_from_records(rows)
    total = {k: round(sum(getattr(t, k) for t in traced), 3) for k in ("model", "sandbox", "tests", "orchestration")}
    return TimeSpent(source="traces", rollouts=len(traced), **total)


def time_from_records(rows: list[RolloutRow]) -> TimeSpent:
    """The steps' durations split by what they waited on: the model (its calls' latencies),
    the agent (the rest of the harness step: its commands, its install, the harness itself),
    the tests (the grade step's test run), sandboxes (creating, preparing, extracting the
    patch, deleting: the sandbox and patch steps and the rest of the grade step)."""
    total = dict.fromkeys(("model", "agent", "sandbox", "tests"), 0.0)
    timed = 0
    for r in rows:
        d = r.durations
        harness, grade = d.harness or 0.0, d.grade or 0.0
        if not (harness or grade or d.sandbox):
            continue
        timed += 1
        model = min(d.model or 0.0, harness)  # concurrent calls could sum past the step
        tests = min(d.tests or 0.0, grade)
        total["model"] += model
        total["agent"] += harness - model
        total["tests"] += tests
        total["sandbox"] += (d.sandbox or 0.0) + (d.patch or 0.0) + grade - tests
    return TimeSpent(source="records", rollouts=timed, **{k: round(v, 3) for k, v in total.items()})


def cost(tokens: Tokens, prices: Any, rollouts: int) -> Cost | None:
    """What the run's tokens cost at `model.prices` (per million input / output tokens; None:
    no prices given). Cached input tokens count at the input price."""
    if prices is None:
        return None
    inp, out = tokens.input * prices.input / 1e6, tokens.output * prices.output / 1e6
    return Cost(input=round(inp, 6), output=round(out, 6), total=round(inp + out, 6),
                per_rollout=round((inp + out) / rollouts, 6) if rollouts else None)


def token_data(joins: list[TokenJoin]) -> TokenData:
    """Token ids and logprobs over the rollouts' token_join counts (response.json): how many
    turns carry them, how well calls joined items, and the re-tokenisation drift (the share
    of turns continuing a conversation whose prompt does not extend the previous turn's
    prompt + generation token for token)."""
    total = {k: sum(getattr(j, k) or 0 for j in joins) for k in TokenJoin.model_fields}  # its counts, in its order
    return TokenData(**total, rollouts_with_tokens=sum(1 for j in joins if j.turns_with_tokens),
                     # rollouts whose history was rewritten (a compaction): more than one segment
                     rollouts_rewritten=sum(1 for j in joins if j.rewritten_turns),
                     drift_rate=_rate(total["drifted_turns"], total["continuing_turns"]),
                     # the share of joined turns a trainer masks (their ids left off)
                     untrusted_rate=_rate(total["untrusted_turns"], total["matched_calls"]))


def suspicious_rollouts(rows: list[RolloutRow]) -> list[str]:
    """`instance_id#repeat` of the rollouts whose patch has suspicious lines."""
    return [r.key for r in rows if r.suspicious]


def _rate(num: int, den: int) -> Rate:
    return Rate(value=round(num / den, 6) if den else None, numerator=num, denominator=den)


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 3)
