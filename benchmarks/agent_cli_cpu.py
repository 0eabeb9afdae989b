"""Host CPU of a rollout of the agent CLIs (Claude Code, OpenCode) against an oracle rollout.

The real workflow on the local provider, the smoke tasks (default 2 tasks x 2 repeats), in
fresh directories: the `oracle` harness, then each CLI given by path (`install.method:
path`, nothing installed per rollout) against the scripted model (benchmarks/scripted.py:
look around, apply the gold patch, then a final message) in `--turns` model turns. On the
local provider the CLI runs on this host, a child of the harness step, so the CPU of the
whole Snakemake process tree counts everything a rollout costs the host: the orchestration,
the rollout's model proxy (Claude Code's Messages calls translated there) and the CLI
itself. The scripted model runs on a thread of this process and is not counted.

    python benchmarks/agent_cli_cpu.py --claude $(npm prefix -g)/bin/claude \
        [--opencode ~/.opencode/bin/opencode] [--tasks 2] [--repeats 2] [--turns 4]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mini_cpu import run  # noqa: E402
from scripted import script  # noqa: E402


@contextlib.contextmanager
def serve(turns: int) -> Iterator[str]:
    """The scripted model for CLIs: the benchmark script's turns, the bash tool found under
    the name each CLI gives it, and a final message (a CLI stops when the model stops calling
    tools) instead of mini's submit command."""
    from sandbatch.testing.scripted_model import Script, ScriptedModel

    raw = {**script(turns), "final": {"content": "Done."}, "fallbacks": {"bash": ["Bash"]}}
    server = ScriptedModel(Script.from_dict(raw)).serve()
    try:
        yield f"http://127.0.0.1:{server.port}/v1"
    finally:
        server.stop()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--claude", help="the claude binary (npm @anthropic-ai/claude-code)")
    p.add_argument("--opencode", help="the opencode binary")
    p.add_argument("--tasks", type=int, default=2, help="smoke tasks (1-5)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--turns", type=int, default=4, help="model turns per rollout (>= 2)")
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=2)
    a = p.parse_args()
    clis = {name: path for name, path in (("claude-code", a.claude), ("opencode", a.opencode)) if path}
    if not clis:
        p.error("give --claude and/or --opencode")
    oracle = run(a, "oracle", {"name": "oracle"})
    for name, path in clis.items():
        with serve(a.turns) as url:
            harness = {"name": name, "config": {"install": {"method": "path", "path": str(Path(path).expanduser())}}}
            cpu = run(a, name, harness, {"name": "scripted", "base_url": url})
        print(f"{name} ({a.turns} model turns): host CPU per rollout {cpu:.2f} s, {cpu / oracle:.2f}x the oracle's "
              f"({cpu - oracle:.2f} s more)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
