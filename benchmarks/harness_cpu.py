"""What an agent CLI that runs in the sandbox costs the host per rollout: Codex (and OpenCode,
given its binary) against the oracle, on Docker.

The real workflow (the repository's profile) on the docker provider, the smoke tasks on the
local base image, one run per harness in a fresh directory: the `oracle`, then each CLI
uploaded into its containers (`install.method: upload`, as the shipped configs do) and
driven by the scripted model (benchmarks/scripted.py: `--turns` turns through the CLI's
shell tool, the last applying the gold patch, then a final message). Measured per rollout,
as benchmarks/utilisation.py measures them: the CPU of the run's process tree (Snakemake, the
step server and its steps, the rollout's model proxy), of the run's containers (the CLI
itself runs there) and their containerd shims (told from others' by the run's label), and
of dockerd and containerd (every container on the machine counts there: on a shared machine
others' do too, so that part is printed apart); and the medians of the harness step's
install (the upload) and agent seconds. The scripted model runs on a thread of this process
and is not counted.

    python benchmarks/harness_cpu.py --codex PREFIX [--opencode BINARY] [--tasks 2] [--repeats 2] [--turns 4]

PREFIX: npm's `@openai/codex` (`npm install -g --prefix PREFIX @openai/codex@0.171.0`), its
launcher, or Codex's binary.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from host_cpu import load  # noqa: E402
from orchestration_cpu import children_cpu  # noqa: E402
from scripted import script  # noqa: E402
from utilisation import Host  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
IMAGE = "sandbatch/base:bookworm"
# each CLI's shell tool, where the script says bash
FALLBACKS = {"bash": [{"name": "exec_command", "rename": {"command": "cmd"}}]}


def run(a, label: str, harness: dict, url: str | None) -> dict:
    wd = Path(tempfile.mkdtemp(prefix=f"sandbatch-harness-cpu-{label}-"))
    name = f"cpu-{label}-{uuid.uuid4().hex[:6]}"  # the label on its containers: the machine is shared
    cfg = {"run": name, "repeats": a.repeats, "concurrency": a.concurrency, "retries": 0,
           "benchmark": {"limit": a.tasks}, "harness": harness, "timeouts": {"agent": 600, "install": 600},
           "sandbox": {"provider": "docker", "default_image": IMAGE}}
    if url:
        cfg["model"] = {"name": "scripted", "base_url": url}
    (wd / "run.json").write_text(json.dumps(cfg))  # JSON is YAML
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(wd), "--workflow-profile",
           str(REPO / "profiles" / "default"), "--cores", str(a.cores), "--configfile", str(wd / "run.json")]
    host = Host()
    cpu0, t0 = children_cpu(), time.monotonic()
    proc = subprocess.run(cmd, cwd=wd, capture_output=True, text=True)
    wall, cpu = time.monotonic() - t0, children_cpu() - cpu0
    parts = host.stop(name)
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"the {label} run failed (exit {proc.returncode}); its directory: {wd}")
    rows = [json.loads(line) for line in (wd / "results" / name / "rollouts.jsonl").read_text().splitlines()]
    if any(not r.get("resolved") for r in rows):
        raise SystemExit(f"the {label} run left rollouts unresolved; its directory: {wd}")
    steps = [json.loads(p.read_text()) for p in (wd / "results" / name).glob("*/*/harness.json")]
    shutil.rmtree(wd, ignore_errors=True)
    n = len(rows)
    out = {"label": label, "n": n, "wall": wall, "tree": cpu / n, "containers": parts["containers"] / n,
           "shims": parts["shims, runc"] / n, "daemons": (parts["dockerd"] + parts["containerd"]) / n,
           "install_s": statistics.median(s["install_s"] for s in steps),
           "agent_s": statistics.median(s["agent_s"] for s in steps)}
    out["total"] = out["tree"] + out["containers"] + out["shims"]
    print(f"{label}: {n} rollouts, wall {wall:.1f} s; CPU-s per rollout: process tree {out['tree']:.2f}, "
          f"its containers {out['containers']:.2f}, their shims {out['shims']:.2f}, total {out['total']:.2f} "
          f"(dockerd + containerd, for every container on the machine: {out['daemons']:.2f}); "
          f"median install {out['install_s']:.1f} s, agent {out['agent_s']:.1f} s", flush=True)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--codex", required=True, help="npm prefix, launcher or binary of Codex")
    p.add_argument("--opencode", help="OpenCode's binary (optional)")
    p.add_argument("--tasks", type=int, default=2, help="smoke tasks (1-5)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--turns", type=int, default=4, help="model turns per rollout (>= 2)")
    p.add_argument("--cores", type=int, default=4)
    p.add_argument("--concurrency", type=int, default=2)
    a = p.parse_args()
    from sandbatch.testing.scripted_model import Script, ScriptedModel

    print(f"load before: {load()}")
    results = [run(a, "oracle", {"name": "oracle"}, None)]
    server = ScriptedModel(Script.from_dict({**script(a.turns), "final": {"content": "Done."},
                                             "fallbacks": FALLBACKS})).serve()
    url = f"http://127.0.0.1:{server.port}/v1"
    try:
        clis = [("codex", a.codex)] + ([("opencode", a.opencode)] if a.opencode else [])
        for name, source in clis:
            results.append(run(a, name, {"name": name, "config": {"install": {"method": "upload", "source": source}}},
                               url))
    finally:
        server.stop()
    print(f"load after: {load()}")
    oracle = results[0]
    for r in results[1:]:
        print(f"{r['label']} - oracle, CPU-s per rollout: {r['total'] - oracle['total']:.2f} "
              f"(process tree {r['tree'] - oracle['tree']:+.2f}, containers {r['containers'] - oracle['containers']:+.2f}, "
              f"shims {r['shims'] - oracle['shims']:+.2f}) over {a.turns} model turns")
    return 0


if __name__ == "__main__":
    sys.exit(main())
