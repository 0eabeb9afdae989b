"""Tools for tests and demos, never used by a run: `scripted_model` is a deterministic
OpenAI-compatible model server (`sandbatch-scripted-model`, or
`python -m sandbatch.testing.scripted_model`) that plays scripted assistant turns per task."""
