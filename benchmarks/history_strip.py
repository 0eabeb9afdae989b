"""What removing the repository's future (sandbox.history: strip) adds to a rollout.

For each repository size, an image is built from the base image with the repository at
/testbed, HEAD detached at a base commit part-way through its history (the rest of the
history on `main` and on tags past the base, as leaky task images ship it). Per provider
and repeat, two fresh sandboxes of that image are prepared as the agent's sandbox is, one
with `keep` and one with `strip`, side by side; the figure is the difference of the two
prepares (median over the repeats), beside the strip script's own CPU time in a third
sandbox (bash `times`: what it costs wherever it runs, free of this machine's load).

Sizes (generated with `git fast-import`, cached under --cache):
  pytest  18,637 commits, ~2,000 files, a pack of ~40 MB (pytest's size at
          pytest-dev__pytest-5262)
  django  31,000 commits, ~6,000 files, a pack of ~350 MB
  real    pytest's own history (--real-pytest: a bare clone, e.g. from `git clone --mirror`),
          cloned whole and checked out at pytest-dev__pytest-5262's base commit, origin removed

    python benchmarks/history_strip.py                              # pytest + django, docker + opensandbox
    python benchmarks/history_strip.py --sizes pytest --providers docker --repeats 5
    python benchmarks/history_strip.py --sizes real --real-pytest /path/to/pytest.git

Needs the Docker engine with sandbatch/base:bookworm, and for opensandbox the real server
(tests/real_opensandbox.py finds it). Prints its figures; exits 1 if a preparation failed.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import logging
import os
import random
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from real_opensandbox import IMAGE, KEY, KEY_ENV, URL, RealServer, reap_run, unavailable, unique_run  # noqa: E402

from sandbatch.sandbox import SandboxSpec, provider_class  # noqa: E402
from sandbatch.sandbox.prepare import STRIP_HISTORY, checkout_script, prepare  # noqa: E402
from sandbatch.tasks import Task  # noqa: E402

# commits, files, bytes of new content per commit (random: it does not compress), base at
SIZES = {"pytest": (18_637, 2_000, 2_400, 10_246), "django": (31_000, 6_000, 11_000, 18_000),
         "tiny": (600, 50, 200, 300)}  # tiny: the script's own test
GENERATOR_VERSION = "2"
PYTEST_5262_BASE = "58e6a09db49f34886ff13f3b7520dd0bcd7063cd"  # the SWE-bench Verified row's base_commit


def fast_import_stream(commits: int, files: int, chunk: int, seed: int = 26):
    """A `git fast-import` stream: `files` files in 40 directories, then `commits` commits on
    main, each changing one or two files; a tag every 100 commits."""
    rng = random.Random(seed)
    paths = [f"pkg{i % 40}/mod{i}.py" for i in range(files)]

    def blob(size: int) -> bytes:
        data = rng.randbytes(size // 2).hex().encode()
        return b"data %d\n%s\n" % (len(data), data)

    when = 1_300_000_000
    for n in range(commits):
        when += 3600
        msg = f"change {n}".encode()
        yield b"commit refs/heads/main\n"
        yield b"committer dev <dev@example.com> %d +0000\n" % when
        yield b"data %d\n%s\n" % (len(msg), msg)
        touched = paths if n == 0 else rng.sample(paths, rng.choice((1, 2)))
        for path in touched:
            yield b"M 100644 inline %s\n" % path.encode()
            yield blob(200 if n == 0 else chunk)
        yield b"\n"
        if n and n % 100 == 0:
            yield b"reset refs/tags/v%d\nfrom refs/heads/main\n\n" % n


def generated(cache: Path, size: str) -> Path:
    commits, files, chunk, base = SIZES[size]
    repo = cache / f"{size}-{GENERATOR_VERSION}" / "testbed"
    if (repo / ".git" / "sandbatch-done").exists():
        return repo
    subprocess.run(["rm", "-rf", str(repo)], check=True)
    repo.mkdir(parents=True)
    git = ["git", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    proc = subprocess.Popen([*git, "fast-import", "--quiet"], stdin=subprocess.PIPE)
    for part in fast_import_stream(commits, files, chunk):
        proc.stdin.write(part)
    proc.stdin.close()
    assert proc.wait() == 0
    base_sha = subprocess.run([*git, "rev-list", "--reverse", "main"], capture_output=True, text=True,
                              check=True).stdout.split()[base - 1]
    subprocess.run([*git, "checkout", "-q", "--detach", base_sha], check=True)
    (repo / ".git" / "sandbatch-done").touch()
    return repo


def real_pytest(cache: Path, mirror: str) -> Path:
    repo = cache / "real-pytest-5262" / "testbed"
    if (repo / ".git" / "sandbatch-done").exists():
        return repo
    subprocess.run(["rm", "-rf", str(repo)], check=True)
    repo.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "clone", "-q", "--no-local", f"file://{os.path.abspath(mirror)}", str(repo)], check=True)
    git = ["git", "-C", str(repo)]
    subprocess.run([*git, "checkout", "-q", PYTEST_5262_BASE], check=True)
    subprocess.run([*git, "remote", "remove", "origin"], check=True)
    (repo / ".git" / "sandbatch-done").touch()
    return repo


def image_for(docker: str, repo: Path) -> str:
    """An image of the base image with `repo` at /testbed (built once per repository)."""
    key = hashlib.sha256(f"{repo}:{(repo / '.git' / 'sandbatch-done').stat().st_mtime_ns}".encode())
    tag = f"sandbatch/bench-history-{repo.parent.name.lower()}:{key.hexdigest()[:12]}"
    if subprocess.run([docker, "image", "inspect", tag], capture_output=True).returncode != 0:
        (repo.parent / "Dockerfile").write_text(f"FROM {IMAGE}\nCOPY testbed /testbed\n")
        subprocess.run([docker, "build", "-q", "-t", tag, str(repo.parent)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return tag


def repo_figures(repo: Path) -> str:
    git = ["git", "-C", str(repo)]
    count = lambda *a: subprocess.run([*git, "rev-list", "--count", *a], capture_output=True,  # noqa: E731
                                      text=True, check=True).stdout.strip()
    pack = sum(p.stat().st_size for p in (repo / ".git" / "objects" / "pack").glob("*.pack"))
    return f"{count('--all')} commits ({count('HEAD')} up to the base), pack {pack / 2**20:.0f} MB"


async def measure(provider, image: str, run: str, repeats: int) -> dict[str, object]:
    spec = SandboxSpec(image=image, workdir="/testbed", labels={"run": run}, ttl_seconds=1800)
    task = Task(id="bench", instance_id="bench", base_commit=None, workdir="/testbed")
    added, keep_s, strip_s, report = [], [], [], None
    for _ in range(repeats):
        times = {}
        for strip in (False, True):
            sandbox = await provider.create(spec)
            try:
                t0 = time.monotonic()
                _, repos = await prepare(sandbox, task, timeout=1200, strip=strip)
                times[strip] = time.monotonic() - t0
                report = repos or report
            finally:
                await sandbox.delete()
        keep_s.append(times[False])
        strip_s.append(times[True])
        added.append(times[True] - times[False])
    once = await once_per_image(provider, spec, task, run, repeats)
    sandbox = await provider.create(spec)
    try:
        res = await sandbox.exec(f"bash -c {shlex.quote(STRIP_HISTORY)} x /testbed >/dev/null; times",
                                 timeout=1200, cwd="/testbed")
    finally:
        await sandbox.delete()
    user, system = (_seconds(t) for t in res.stdout.splitlines()[-1].split())
    return {"keep": statistics.median(keep_s), "strip": statistics.median(strip_s),
            "added": statistics.median(added), "added_max": max(added), "cpu": user + system, "report": report,
            **once}


async def once_per_image(provider, spec: SandboxSpec, task: Task, run: str, repeats: int) -> dict[str, float]:
    """Where the provider keeps images (docker): the first use (the image made), then per
    sandbox the lookup and the prepare in its image, against a prepare that keeps."""
    script = checkout_script(task, spec.workdir, strip=True) + f" # {run}"  # a tag of this run's own
    t0 = time.monotonic()
    made = await provider.image_after(spec, script, timeout=1200)
    if made is None:
        return {}
    first = time.monotonic() - t0
    added = []
    try:
        for _ in range(repeats):
            t = {}
            for cached in (False, True):
                t0 = time.monotonic()
                image = (await provider.image_after(spec, script, timeout=1200))[0] if cached else spec.image
                lookup = time.monotonic() - t0
                sandbox = await provider.create(spec.model_copy(update={"image": image}))
                try:
                    t0 = time.monotonic()
                    await prepare(sandbox, task, timeout=1200, strip=False)
                    t[cached] = lookup + time.monotonic() - t0
                finally:
                    await sandbox.delete()
            added.append(t[True] - t[False])
    finally:
        subprocess.run(["docker", "image", "rm", "-f", made[0]], capture_output=True)
    return {"first": first, "cached_added": statistics.median(added)}


def _seconds(text: str) -> float:
    minutes, _, seconds = text.rstrip("s").partition("m")
    return 60 * float(minutes) + float(seconds)


async def with_provider(name: str, fn):
    if name == "docker":
        return await fn(provider_class("docker")({}))
    server = RealServer(URL, KEY)
    options = {"connection": {"domain": server.domain, "protocol": server.protocol, "api_key_env": KEY_ENV,
                              "request_timeout": 60},
               "create": {"ready_timeout": 300}, "probe": {"timeout": 300},
               "operations": {"timeout": 1200},
               "network_policy": False}  # the test server has no egress sidecar (tests/real_opensandbox.py)
    async with provider_class("opensandbox")(options) as provider:
        return await fn(provider)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="pytest,django", help="comma-separated: pytest, django, real, tiny")
    ap.add_argument("--providers", default="docker,opensandbox")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--real-pytest", help="a bare clone of pytest-dev/pytest (for --sizes real)")
    ap.add_argument("--cache", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "sandbatch-bench-history"))
    args = ap.parse_args()
    logging.getLogger("opensandbox").setLevel(logging.CRITICAL)  # the SDK logs each exec it retries
    os.environ.setdefault(KEY_ENV, KEY)
    cache = Path(args.cache)
    providers = args.providers.split(",")
    if "opensandbox" in providers and (why := unavailable()):
        print(f"opensandbox: {why}", file=sys.stderr)
        return 1
    for size in args.sizes.split(","):
        t0 = time.monotonic()
        repo = real_pytest(cache, args.real_pytest) if size == "real" else generated(cache, size)
        image = image_for("docker", repo)
        print(f"{size}: {repo_figures(repo)}; repository and image ready in {time.monotonic() - t0:.0f} s")
        for name in providers:
            run = unique_run("bench-history")
            try:
                fig = asyncio.run(with_provider(name, lambda p: measure(p, image, run, args.repeats)))
            finally:
                if name == "opensandbox":
                    reap_run(RealServer(URL, KEY), run)
            [top] = [r for r in fig["report"] if r["path"] == "."]
            load = os.getloadavg()[0]
            print(f"  {name:11} per sandbox: prepare keep {fig['keep']:.2f} s, strip {fig['strip']:.2f} s: added "
                  f"{fig['added']:.2f} s median (max {fig['added_max']:.2f}) over {args.repeats}; strip script "
                  f"{fig['cpu']:.2f} CPU-s; objects {top['objects_before']} -> {top['objects_after']}, "
                  f"{top['bytes_before'] / 2**20:.0f} -> {top['bytes_after'] / 2**20:.0f} MB, "
                  f"refs {top['refs_before']} -> {top['refs_kept']}; load {load:.1f}")
            if "first" in fig:
                print(f"  {name:11} once per image: first use {fig['first']:.2f} s (the image made), then added "
                      f"{fig['cached_added']:.2f} s per sandbox (median; one image lookup)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
