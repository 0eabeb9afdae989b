"""mini-swe-agent's defaults shared by its harness (mini_swe_agent.py) and its host-mode
environment (mini_env.py). Imports nothing: mini_env reads them without the harness module,
and the harness module stays free of mini and litellm (~2 CPU-s to import)."""

BASE_CONFIG = "mini.yaml"  # mini's base config: a built-in name, or a path (host: here; sandbox: in it)
