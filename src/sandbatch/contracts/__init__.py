"""The data the steps hand each other and the run's outputs are read from, as types: the
records the steps write (sandbox, harness, patch, grade) and their file names, a
model_calls.jsonl line, response.json's usage and run data, the rollouts.jsonl row, and the
run's metrics.json and manifest.json. On the ground floor so that every layer reads
them alike; imports core only."""
