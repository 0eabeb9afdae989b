"""Tools for tests and demos, never imported by run code: the scripted model server and its script,
template and answers. May import any run package; none of them imports it.

`scripted_model` is a deterministic OpenAI-compatible model server (`sandbatch-scripted-model`,
or `python -m sandbatch.testing.scripted_model`) that plays scripted assistant turns per task."""
