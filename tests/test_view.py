"""The trajectory viewer: pages of real rollouts, read back from a real browser's DOM.

The run is the real workflow on two smoke tasks (oracle harness: one known tool call,
`apply_patch`, and its output); the conversation rendering is also checked on the real
OpenCode converter's output of a recorded OpenCode run.
"""

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ops_util import run, sandbatch
from services import need_program
from sandbatch.harness import get_harness
from sandbatch.contracts.records import GradeRecord
from sandbatch.contracts.row import RolloutRow
from sandbatch.reporting.view import COLUMNS, page, write_index

CHROMIUM = shutil.which("chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
RECORDED = Path(__file__).parent / "fixtures" / "opencode_1.18.33_events.jsonl"
MINI = Path(__file__).parent / "fixtures" / "mini_swe_agent_2.4.1_messages.jsonl"


@pytest.fixture
def _chromium():
    need_program("chromium", "Debian chromium: run scripts/services/chromium.sh (as root)")


needs_chromium = pytest.mark.usefixtures("_chromium")


def dom(url: str, tmp_path: Path) -> str:
    """The DOM after the page's scripts ran, without the scripts themselves."""
    out = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000",
                          "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return re.sub(r"<script\b.*?</script>", "", out.stdout, flags=re.S)


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    wd = tmp_path_factory.mktemp("view")
    done = run(wd, "--config", "benchmark={'limit': 2}")
    assert done.returncode == 0, done.stderr[-3000:]
    return wd


@pytest.mark.slow
@needs_chromium
def test_rollout_page_shows_the_tool_calls_of_a_known_rollout(smoke_run, tmp_path):
    view = smoke_run / "results" / "default" / "report" / "view"
    html = dom((view / "rollouts" / "smoke__calc-1" / "0.html").as_uri(), tmp_path)
    call = re.search(r'<div class="turn tool-call">.*?</div></div>', html, re.S)
    assert call, html[:3000]
    assert '<span class="fname">apply_patch</span>' in call.group(0)
    assert "gold.patch" in call.group(0)  # its arguments
    assert "Applied patch calc.py cleanly." in call.group(0)  # its output, inside the call
    assert "divide() truncates the result" in html  # the prompt
    assert '<span class="add">+    return a / b</span>' in html  # the patch, highlighted
    assert re.search(r"<td>FAIL_TO_PASS</td><td>tests/test_calc.py::test_divide</td><td class=\"PASSED\">PASSED", html)
    assert "Grader log" in html and "SANDBATCH_TEST_EXIT_CODE" in html
    assert re.search(r"<td>grade</td><td>\d+\.\d\d</td>", html)  # phase timings


@pytest.mark.slow
@needs_chromium
def test_index_lists_every_rollout_with_links(smoke_run, tmp_path):
    view = smoke_run / "results" / "default" / "report" / "view"
    html = dom((view / "index.html").as_uri(), tmp_path)
    rows = re.findall(r'<tr><td><a href="(rollouts/[^"]+)">([^<]+)</a></td><td>(\d+)</td><td>([^<]*)</td>'
                      r'<td class="res-\w+">(\w+)</td><td class="status-(\w+)">', html)
    assert sorted(rows) == [("rollouts/smoke__calc-1/0.html", "smoke__calc-1", "0", "smoke/calc", "yes", "ok"),
                            ("rollouts/smoke__textutils-1/0.html", "smoke__textutils-1", "0", "smoke/textutils", "yes",
                             "ok")]
    assert "2 of 2 rollouts" in html
    assert "2 rollouts of 2 tasks: 2 resolved (100.0%), 0 unresolved, 0 infra errors, 0 flagged." in html
    assert '<option value="smoke/calc">smoke/calc</option>' in html  # the repository filter


@pytest.mark.slow
def test_sandbatch_view_writes_the_same_pages(smoke_run, tmp_path):
    out = sandbatch("view", "default", "-d", str(smoke_run), "-o", str(tmp_path / "v"))
    assert out.returncode == 0, out.stderr
    assert "2 rollout(s); open file://" in out.stdout
    report = smoke_run / "results" / "default" / "report" / "view"
    pages = ("index.html", "rollouts/smoke__calc-1/0.html", "rollouts/smoke__textutils-1/0.html")
    for rel in pages:
        assert (tmp_path / "v" / rel).read_text() == (report / rel).read_text(), rel
    # without -o, where the run wrote it: one viewer per run
    written = {rel: (report / rel).stat().st_mtime_ns for rel in pages}
    out = sandbatch("view", "default", "-d", str(smoke_run))
    assert out.returncode == 0 and f"open {(report / 'index.html').as_uri()}" in out.stdout, out.stdout + out.stderr
    assert all((report / rel).stat().st_mtime_ns > t for rel, t in written.items())
    assert not (smoke_run / "results" / "default" / "view").exists()
    bad = sandbatch("view", "nosuchrun", "-d", str(smoke_run))
    assert bad.returncode == 2 and "no such run" in bad.stderr and "Traceback" not in bad.stderr


@needs_chromium
def test_index_renders_rows_lazily(tmp_path):
    rows = [[f"org__proj-{i:04d}", 0, f"org/p{i % 3}", bool(i % 4 and i % 2), "ok" if i % 4 else "agent_error",
             None, float(i % 2), 1000 + i, 12.5, f"rollouts/org__proj-{i:04d}/0.html",
             "resolved" if i % 4 and i % 2 else "unresolved", i % 7 == 0] for i in range(250)]
    assert len(rows[0]) == len(COLUMNS)
    write_index(tmp_path, rows, "t", "s")
    html = dom((tmp_path / "index.html").as_uri(), tmp_path)
    body = html[html.index('<tbody id="rows">'):html.index("</tbody>")]
    assert body.count("<tr>") == 100  # the first chunk; more as the table scrolls
    assert "250 of 250 rollouts" in html
    assert '<option value="agent_error">agent_error</option>' in html
    # filter and sort from the address: agent_error rows (every 4th), most tokens first
    html = dom((tmp_path / "index.html").as_uri() + "#status=agent_error&repo=org%2Fp1&sort=tokens&desc=1", tmp_path)
    tasks = re.findall(r'<a href="rollouts/[^"]+">(org__proj-\d+)</a>', html)
    expected = sorted((r for r in rows if r[4] == "agent_error" and r[2] == "org/p1"), key=lambda r: -r[7])
    assert tasks == [r[0] for r in expected] and len(tasks) == 21
    assert "21 of 250 rollouts" in html
    # the outcome filter: flagged rows (every 7th), and the resolved column of each row shown
    html = dom((tmp_path / "index.html").as_uri() + "#show=flagged", tmp_path)
    shown = re.findall(r'<a href="rollouts/[^"]+">org__proj-(\d+)</a></td><td>0</td><td>[^<]*</td>'
                       r'<td class="res-(yes|no)">(yes|no)</td>', html)
    assert [(int(i), r) for i, r, _ in shown] == [(i, "yes" if i % 4 and i % 2 else "no") for i in range(0, 250, 7)]
    assert '<option value="flagged">flagged</option>' in html


def test_conversation_of_a_recorded_opencode_run():
    harness = get_harness("opencode")
    items = harness.convert([json.loads(line) for line in RECORDED.read_text().splitlines()],
                            harness.options_of({})).items
    html = page.conversation("fix the bug", items)
    assert html.index("fix the bug") < html.index("reasoning") < html.index('<span class="fname">bash</span>')
    assert re.search(r'<details class="turn reasoning"><summary class="role">reasoning \(\d+ B\)</summary>', html)
    assert html.count('class="turn tool-call"') == 2 and html.count('class="turn tool-output"') == 2
    assert "<pre>command: ls\ndescription: list files</pre>" in html  # arguments as text, not JSON
    assert "README.md\ncalc.py" in html  # the first call's output, with it


def test_long_outputs_fold_with_their_size():
    items = [{"type": "function_call", "call_id": "c", "name": "bash", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "c", "output": "x\n" * 5000}]
    html = page.conversation(None, items)
    head = "x\n" * 20
    assert f'<pre class="head">{head}\u2026</pre><details><summary>show all output (5000 lines, 9.8 KB)</summary>' in html


@pytest.mark.parametrize("output, shown", [
    ('{\n  "returncode": 2,\n  "output": "a \\u003e b\\nc\\n"\n}', ("a > b\nc\n", 2)),  # mini-swe-agent's observation
    ('{"output": "", "returncode": -1, "exception_info": "timed out"}', ("timed out", -1)),
    ('"one\\ntwo"', ("one\ntwo", None)),  # a JSON string literal
    ('{"output": "x", "files": 3}', ('{"output": "x", "files": 3}', None)),  # other keys: kept as it is
    ("plain\ntext {", ("plain\ntext {", None)),
])
def test_tool_results_read_as_the_agent_saw_them(output, shown):
    assert page.tool_result(output) == shown


def rendered_text(page_file: Path, tmp_path: Path) -> str:
    """What a reader sees of a page: its body's innerText as Chromium lays it out (CSS applied,
    folded parts hidden), read back through a copy of the page that shows it in a <pre>."""
    probe = tmp_path / "probe.html"
    script = ("<script>var t = document.body.innerText; document.body.innerHTML = '<pre id=\"rendered\"></pre>';"
              "document.getElementById('rendered').textContent = t;</script>")
    probe.write_text(page_file.read_text().replace("</body>", script + "</body>"))
    got = re.search(r'<pre id="rendered">(.*?)</pre>', dom(probe.as_uri(), tmp_path), re.S)
    assert got, "no rendered text"
    return html.unescape(got.group(1))


@needs_chromium
def test_mini_swe_agent_trajectory_reads_as_text_in_the_browser(tmp_path):
    """A recorded mini-swe-agent run and a long failing command: outputs are the text the agent
    saw (line breaks, no JSON escapes), the exit status beside each, the long one folded."""
    harness = get_harness("mini-swe-agent")
    conv = harness.convert([json.loads(line) for line in MINI.read_text().splitlines()], harness.options_of({}))
    items = conv.items
    long_out = "".join(f"tests/test_{i}.py::test_case FAILED  # got {i} > {i - 1}\n" for i in range(120))
    items += [{"type": "function_call", "call_id": "long", "name": "bash", "arguments": '{"command": "pytest -q"}'},
              {"type": "function_call_output", "call_id": "long",
               "output": json.dumps({"returncode": 1, "output": long_out}, indent=2).replace(">", "\\u003e")}]
    rollout = tmp_path / "rollout"
    rollout.mkdir()
    (rollout / "response.json").write_text(json.dumps({"output": items, "usage": {}, "model": "m",
                                                       "instructions": conv.instructions, "input": conv.input,
                                                       "sandbatch": {"feedback": conv.feedback}}))
    row = RolloutRow(run="r", dir=str(rollout), instance_id="smoke__calc-1", task_id="smoke__calc-1", repeat=0,
                     status="ok")
    out = tmp_path / "page.html"
    out.write_text(page.render(row, "the task's bare prompt", "index.html"))
    text = rendered_text(out, tmp_path)
    assert "OUTPUT exit 0\nREADME.md\ncalc.py\npyproject.toml\ntests\n" in text, text[:3000]
    assert "OUTPUT exit 1\ntests/test_0.py::test_case FAILED  # got 0 > -1\n" in text
    assert "tests/test_19.py::test_case FAILED  # got 19 > 18\n\u2026\nshow all output (120 lines, " in text
    assert "test_20.py" not in text  # folded until "show all" is opened
    # the system prompt, the task prompt as mini rendered it (not the bare one given), then
    # each of mini's three format-error messages after the reply it rejected
    assert text.index("SYSTEM PROMPT\nYou are a helpful assistant") < text.index(
        "PROMPT\nPlease solve this issue: divide() truncates") < text.index("ASSISTANT\nI will list the files.")
    assert "bare prompt" not in text
    assert len(re.findall(r"ASSISTANT\nDone\.\nHARNESS FEEDBACK\nTool call error:", text)) == 3, text[-3000:]
    for escaped in ("\\n", "\\u003e", "returncode", '"output"'):
        assert escaped not in text, escaped
    shot = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1000,1400",
                           f"--screenshot={tmp_path / 'page.png'}", out.as_uri()], capture_output=True, timeout=120)
    assert shot.returncode == 0 and (tmp_path / "page.png").stat().st_size > 10_000, shot.stderr[-2000:]


def test_grade_shows_tampering_when_present():
    assert page.flags_html(GradeRecord()) == page.flags_html(None) == ""
    html = page.flags_html(GradeRecord(tampering=[{"path": "tests/test_calc.py", "kind": "modified",
                                                   "action": "restored"}]))
    assert "<td>tests/test_calc.py</td><td>modified</td><td>restored</td>" in html


@pytest.mark.parametrize("arguments, text", [
    ('{"command": "cd /testbed\\npython - <<EOF\\nprint(1)\\nEOF"}', "cd /testbed\npython - <<EOF\nprint(1)\nEOF"),
    ('{"command": "ls -la", "timeout": 30}', "command: ls -la\ntimeout: 30"),
    ('{"path": "a.py", "content": "x = 1\\ny = 2\\n"}', "path: a.py\ncontent:\nx = 1\ny = 2\n"),
    ("not json", "not json"),
])
def test_tool_call_arguments_read_as_text(arguments, text):
    assert page.args_text(arguments) == text


@pytest.fixture(scope="module")
def traced_run(tmp_path_factory):
    """One smoke rollout with its trace written to trace.jsonl (traces.exporters: [file])."""
    wd = tmp_path_factory.mktemp("view-traced")
    done = run(wd, "--config", "benchmark={'limit': 1}", "traces={'exporters': ['file']}")
    assert done.returncode == 0, done.stderr[-3000:]
    return wd / "results" / "default"


@pytest.mark.slow
@needs_chromium
def test_rollout_page_draws_its_trace_and_shows_flags_first(traced_run, tmp_path):
    """The waterfall of a real rollout's trace: a row per span in tree order, each bar placed
    on the rollout's time axis; tampering and suspicious code at the top of the page."""
    rollout = traced_run / "smoke__calc-1" / "0"
    grade = json.loads((rollout / "grade.json").read_text())
    grade["tampering"] = [{"path": "tests/test_calc.py", "kind": "modified", "action": "restored"}]
    grade["suspicious"] = [{"path": "conftest.py", "line": 3, "reason": "patches pytest", "text": "import _pytest"}]
    (rollout / "grade.json").write_text(json.dumps(grade))
    row = RolloutRow(**{**json.loads((traced_run / "rollouts.jsonl").read_text().splitlines()[0]), "dir": str(rollout)})
    out = tmp_path / "page.html"
    out.write_text(page.render(row, "divide() truncates; fix it", "index.html"))
    html = dom(out.as_uri(), tmp_path)
    assert html.index('id="flags"') < html.index('class="kv"') < html.index('id="conversation"')
    assert "<td>conftest.py:3</td><td>patches pytest</td>" in html
    spans = re.findall(r'<tr class="span"><td class="sname" style="padding-left:([\d.]+)em"[^>]*>([^ <]+) ', html)
    names = [n for _, n in spans]
    assert names[0] == "rollout" and {"sandbox", "harness", "convert", "patch", "grade"} <= set(names)
    depth = {n: float(d) for d, n in spans}
    assert depth["rollout"] < depth["grade"] < depth["grader"] < depth["grade.tests"]
    assert names.index("grade") < names.index("grader") < names.index("grade.tests")  # children after parents
    bars = re.findall(r'class="bar k-(\w+)[^"]*" style="left:([\d.]+)%;width:([\d.]+)%"', html)
    assert bars[0] == ("orchestration", "0.000", "100.000")  # the rollout spans the axis
    assert {k for k, _, _ in bars} >= {"sandbox", "tests", "orchestration"}
    assert all(float(left) + float(width) <= 100.2 for _, left, width in bars)
    # the eval exec also prints the verdict after the script: the command goes on after `2>&1`
    assert re.search(r'sandbox\.local\.exec <span class="muted">bash [^<]*eval\.sh 2&gt;&amp;1[^<]* → exit 0</span>', html)
    report = (traced_run / "report.md").read_text()
    assert re.search(r"Where the time went \(1 traced rollouts, [\d.]+ s in all\): model calls 0\.0 s \(0%\), "
                     r"sandbox operations [\d.]+ s", report), report
