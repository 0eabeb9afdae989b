"""The real NeMo Gym (PyPI nemo-gym 0.4.0) for tests that check outputs with its own code.

It needs Python >= 3.12 and dependencies that do not fit sandbatch's environment, so
`scripts/services/nemo_gym.sh` installs it in an environment of its own (CI does, through
scripts/services.sh) at SANDBATCH_NEMO_GYM_VENV (default /var/lib/sandbatch/nemo-gym-0.4.0).
A test runs Python in that environment (`run`): a snippet that reads JSON on stdin and
prints JSON. A missing environment skips the test, or fails it under
SANDBATCH_REQUIRE_SERVICES=1 (tests/services.py).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from pathlib import Path
from typing import Any

from services import missing

VERSION = "0.4.0"
VENV = Path(os.environ.get("SANDBATCH_NEMO_GYM_VENV", f"/var/lib/sandbatch/nemo-gym-{VERSION}"))
SETUP = "scripts/services/nemo_gym.sh"


def python() -> Path:
    """The python of NeMo Gym's environment, or `missing`."""
    exe = VENV / "bin" / "python"
    if not (VENV / f".sandbatch-nemo-gym-{VERSION}").is_file() or not exe.is_file():
        missing(f"nemo-gym {VERSION} is not set up at {VENV}; run `bash {SETUP}` (as root)")
    return exe


def run(code: str, payload: Any = None, timeout: float = 300) -> Any:
    """Run `code` in NeMo Gym's environment with `payload` (JSON) on stdin; the JSON it prints.

    The snippet reads `payload = json.load(sys.stdin)` and ends with `print(json.dumps(...))`;
    a non-zero exit fails the test with its stderr."""
    proc = subprocess.run([str(python()), "-I", "-c", code], input=json.dumps(payload), capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"nemo-gym snippet failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


_VALIDATE = """
import json, sys
from pydantic import ValidationError
from nemo_gym.openai_utils import NeMoGymResponse, TokenIDLogProbMixin
errors, training = [], []
for resp in json.load(sys.stdin):
    try:
        parsed = NeMoGymResponse.model_validate(resp)
    except ValidationError as exc:
        errors.append([f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()])
        training.append([])
        continue
    errors.append([])
    training.append([type(item).__name__ for item in parsed.output if isinstance(item, TokenIDLogProbMixin)])
print(json.dumps({"errors": errors, "training": training}))
"""


def validate_responses(responses: list[dict[str, Any]]) -> tuple[list[list[str]], list[list[str]]]:
    """Each response through `NeMoGymResponse.model_validate`: per response, its validation
    errors ([] = valid) and the class names of its output items that carry the training
    fields (prompt_token_ids, generation_token_ids, generation_log_probs)."""
    out = run(_VALIDATE, responses)
    return out["errors"], out["training"]


_VALIDATE_PARAMS = """
import json, sys
from pydantic import ValidationError
from nemo_gym.openai_utils import NeMoGymResponseCreateParamsNonStreaming
errors = []
for params in json.load(sys.stdin):
    try:
        NeMoGymResponseCreateParamsNonStreaming.model_validate(params)
        errors.append([])
    except ValidationError as exc:
        errors.append([f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()])
print(json.dumps(errors))
"""


def validate_create_params(params: list[dict[str, Any]]) -> list[list[str]]:
    """Each `responses_create_params` through NeMo Gym's `NeMoGymResponseCreateParamsNonStreaming`
    (what its agents' /run validates; unknown keys are errors): per entry, its errors."""
    return run(_VALIDATE_PARAMS, params)


_CHAINS = """
import json, sys
from nemo_gym.openai_utils import NeMoGymResponse, TokenIDLogProbMixin
out = []
for resp in json.load(sys.stdin):
    seen, chained, turns = [], True, 0
    for item in NeMoGymResponse.model_validate(resp).output:
        if isinstance(item, TokenIDLogProbMixin):
            turns += 1
            chained = chained and item.prompt_token_ids[:len(seen)] == seen
            seen = list(item.prompt_token_ids) + list(item.generation_token_ids)
    out.append([turns, chained])
print(json.dumps(out))
"""


def training_chains(responses: list[dict[str, Any]]) -> list[tuple[int, bool]]:
    """Each response read by NeMo Gym's `NeMoGymResponse` as a trainer reads it: (how many of
    its items carry the training fields, whether each such item's prompt extends the previous
    one's prompt + generation, the check NeMo RL makes before it trains on a Gym result)."""
    return [tuple(x) for x in run(_CHAINS, responses)]


def assert_valid_responses(responses: list[dict[str, Any]]) -> None:
    """Every response.json is a Responses object for openai-python's `Response` (this
    environment's openai) and for NeMo Gym's `NeMoGymResponse` (its own environment's)."""
    from openai.types.responses import Response

    for resp in responses:
        Response.model_validate(resp)
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in resp["metadata"].items()), resp["metadata"]
    errors, _ = validate_responses(responses)
    assert errors == [[] for _ in responses], errors


@functools.cache
def _site_packages() -> Path:
    return Path(run("import json, os, nemo_gym; print(json.dumps(os.path.dirname(os.path.dirname(nemo_gym.__file__))))"))


def package_file(relative: str) -> Path:
    """A file shipped in the nemo-gym wheel, e.g.
    `responses_api_agents/mini_swe_agent_2/data/example.jsonl`."""
    path = _site_packages() / relative
    assert path.is_file(), f"{path}: not in nemo-gym {VERSION}"
    return path


def reward_profile(inputs: Path, rollouts: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """`gym eval profile --inputs INPUTS --rollouts ROLLOUTS` (NeMo Gym's own command line),
    then its outputs: the per-task rows of <rollouts>_reward_profiling.jsonl and the
    per-agent rows of <rollouts>_agent_metrics.json."""
    gym = python().parent / "gym"
    proc = subprocess.run([str(gym), "eval", "profile", "--inputs", str(inputs), "--rollouts", str(rollouts)],
                          capture_output=True, text=True, timeout=300, cwd=rollouts.parent)
    assert proc.returncode == 0, f"gym eval profile failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    profile = rollouts.with_name(rollouts.stem + "_reward_profiling.jsonl")
    agents = rollouts.with_name(rollouts.stem + "_agent_metrics.json")
    rows = [json.loads(line) for line in profile.read_text().splitlines() if line.strip()]
    return rows, json.loads(agents.read_text())


_PASS_AT_K = """
import json, sys
from nemo_gym.reward_profile import compute_pass_majority_metrics
metrics, _, _, _ = compute_pass_majority_metrics(json.load(sys.stdin))
print(json.dumps({k: v for k, v in metrics.items() if k.startswith("pass@") and k.count("/") == 1}))
"""


def pass_at_k(rollouts_by_task: list[list[dict[str, Any]]]) -> dict[str, float]:
    """NeMo Gym's pass@k (`compute_pass_majority_metrics`, what its SWE agents report) of
    rollout rows grouped by task: {"pass@1/accuracy": percent, ...}."""
    return run(_PASS_AT_K, rollouts_by_task)
