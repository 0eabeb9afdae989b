"""The file names of a rollout's records inside results/<run>/<task>/<repeat>/."""

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
