"""What a rollout is turned into: Responses items, ATIF, usage, the token join, the rollouts.jsonl
row, exports. May import core, contracts, tasks, trace, sandbox.base and proxy.tokens."""
