"""The file names of a rollout's records inside results/<run>/<task>/<repeat>/."""

from pathlib import Path

SANDBOX = "sandbox.json"
EVENTS = "events.jsonl"
HARNESS = "harness.json"
MODEL_CALLS = "model_calls.jsonl"
RESPONSE = "response.json"
TRAJECTORY = "trajectory.json"  # the same conversation in Harbor's ATIF (sandbatch.rollout.atif)
PATCH = "patch.diff"
PATCH_INFO = "patch.json"
GRADE = "grade.json"
# one JSON line per record saved, with the fields `sandbatch status` counts (contracts/records.py's
# SUMMARY): it reads this small file instead of a 100 KB grade.json; for a record saved twice the
# last line wins
INDEX = "records.jsonl"
# results/<run>/manifest.json: the aggregate's last file, written after its reap of the run's sandboxes
MANIFEST = "manifest.json"


def attempt_log(log: "Path | str", attempt: int) -> Path:
    """Where a failed attempt of the step whose log is `log` keeps its reason for the console:
    Snakemake empties the step's log when the retry starts, which can be before the console has
    read the failed attempt's."""
    log = Path(log)
    return log.with_name(f"{log.stem}.attempt-{attempt}.log")
