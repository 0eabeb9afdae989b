"""What a rollout is turned into."""
