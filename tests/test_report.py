"""`snakemake --report` holds the metrics table and the plots, and renders in a real browser.

The browser check needs Debian's `chromium` (scripts/services/chromium.sh installs it).
"""

import json
import re
import shutil
import struct
import subprocess
import zlib
from xml.etree import ElementTree

import pytest

from ops_util import fake_git, run, smoke_rows, write_tasks
from services import need

pytestmark = pytest.mark.slow
CHROMIUM = shutil.which("chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


WRONG, RIGHT, NO_GRADER = "smoke__calc-1", "smoke__textutils-1", "smoke__inventory-1"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """Three smoke tasks, three outcomes: the oracle applies a wrong fix to one (its tests
    fail), the gold patch to another (resolved), and the third never gets a grading sandbox
    (`git init` fails there: an infrastructure error)."""
    wd = tmp_path_factory.mktemp("report")
    rows = smoke_rows()[:3]
    assert [r["instance_id"] for r in rows] == [WRONG, RIGHT, NO_GRADER]
    rows[0]["patch"] = rows[0]["patch"].replace("+    return a / b", "+    return int(a / b)")
    args = ["--config", f"benchmark={{'tasks': '{write_tasks(wd / 'tasks.jsonl', rows)}'}}"]
    env = fake_git(wd / "bin", [{"cmd": "init", "labels": {"role": "grade", "task": NO_GRADER}, "fail": 1000}])
    done = run(wd, *args, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    rep = run(wd, *args, "--report", "report.html")
    assert rep.returncode == 0, rep.stdout[-3000:] + rep.stderr[-3000:]
    return wd


def test_report_holds_the_metrics_table_and_plots(report):
    html = (report / "report.html").read_text()
    assert "resolved (all rollouts)" in html and "33.3% (1/3)" in html
    for name in ("metrics.html", "resolved_by_repo.svg", "durations.svg", "tokens.svg", "failures.svg"):
        assert name in html, name
    plots = report / "results" / "default" / "report"
    svg = ElementTree.parse(plots / "durations.svg").getroot()
    texts = {t.text for t in svg.iter("{http://www.w3.org/2000/svg}text")}
    assert {"sandbox", "harness", "grade", "p50", "p95"} <= texts
    resolved = ElementTree.parse(plots / "resolved_by_repo.svg").getroot()
    texts = {t.text for t in resolved.iter("{http://www.w3.org/2000/svg}text")}
    assert {"smoke/calc", "smoke/textutils", "100%", "0%"} <= texts
    failures = ElementTree.parse(plots / "failures.svg").getroot()
    assert "sandbox_prepare (infra_error)" in {t.text for t in failures.iter("{http://www.w3.org/2000/svg}text")}
    metrics = json.loads((report / "results/default/metrics.json").read_text())
    assert metrics["resolved"] == 1 and metrics["cost"] is None  # no model.prices, no cost
    assert metrics["time_s"]["source"] == "records" and metrics["time_s"]["tests"] > 0


def test_report_md_reads_task_by_task(report):
    """report.md: a row per task saying what became of it, the infrastructure errors by class
    with an example, the plots and the viewer linked where they are."""
    run_dir = report / "results" / "default"
    text = (run_dir / "report.md").read_text()
    table = re.findall(r"^\| (smoke__\S+) \| (\d/\d) \| ([^|]+) \| (\d+) \| ([\d.]+) \|$", text, re.M)
    assert [row[:3] for row in table] == [(WRONG, "0/1", "tests failed"), (RIGHT, "1/1", "resolved"),
                                          (NO_GRADER, "0/1", "infra_error: sandbox_prepare")], text
    assert all(float(row[4]) > 0 for row in table)
    infra = re.search(r"^\| sandbox_prepare \| 1 \| smoke__inventory-1#0 \| grade \| (.+) \|$", text, re.M)
    assert infra and "git" in infra.group(1), text
    assert "(ok)" not in text
    for link in re.findall(r"\]\(([^)]+)\)", text):  # every link resolves beside report.md
        assert (run_dir / link).is_file(), link
    assert len(re.findall(r"!\[[^]]+\]\(report/\w+\.svg\)", text)) == 4
    page = (run_dir / "report" / "metrics.html").read_text()
    assert page.count("<svg ") == 4 and "<td>tests failed</td>" in page
    assert "3 rollouts of 3 tasks: 1 resolved (33.3%), 1 unresolved, 1 infra errors, 0 flagged." in page


def _png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Decode an 8-bit RGB/RGBA PNG into rows of raw pixel bytes (stdlib only)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and color in (2, 6)
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, rows


def test_report_renders_in_headless_chromium(report, tmp_path):
    need(None if CHROMIUM else "Debian chromium is not installed; run scripts/services/chromium.sh (as root)")
    url = (report / "report.html").as_uri()
    common = [CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000"]
    dom = subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    # the landing page shows the metrics table (outside the scripts that carry the data)
    visible = re.sub(r"<script\b.*?</script>", "", dom.stdout, flags=re.S)
    assert "<td>resolved (all rollouts)</td>" in visible, visible[:3000]
    assert "33.3% (1/3)" in visible
    assert ">Metrics<" in visible and ">Plots<" in visible
    shot = tmp_path / "report.png"
    # on a loaded machine a screenshot can be taken before the page has painted: try again
    for _ in range(3):
        out = subprocess.run([*common, "--window-size=1280,900", f"--screenshot={shot}", url],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0 and shot.is_file(), out.stderr[-2000:]
        width, height, rows = _png_pixels(shot.read_bytes())
        assert (width, height) == (1280, 900)
        bpp = len(rows[0]) // width
        pixels = [row[i:i + 3] for row in rows[::4] for i in range(0, len(row), bpp * 4)]
        background = max(set(pixels), key=pixels.count)
        painted = sum(1 for p in pixels if p != background) / len(pixels)
        if len(set(pixels)) > 20 and painted > 0.05:
            break
    assert len(set(pixels)) > 20 and painted > 0.05, (len(set(pixels)), painted)
