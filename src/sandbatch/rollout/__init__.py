"""What a rollout is turned into: step records, Responses items, ATIF, usage, the token join,
the rollouts.jsonl row, exports. May import core, tasks, trace, sandbox.base and proxy.tokens."""
