"""googletest under ctest (the corpus's fmt row): outcomes confirmed by the tests' own processes.

A header the patch adds prints googletest's `[       OK ]` line for the test that just failed
from an exit hook and ends the process with `_exit(0)`: the log and ctest agree on a pass, and
with `grading.tampering: log_only` it earns 1.0. With the defences on, each decisive test runs
again alone, as its own process with `--gtest_break_on_failure`, and a shard-variable canary
checks that the binary's exit status is googletest's (sandbatch.grading.googletest).

The real rows are slow here (the eval script recompiles fmt's ranges-test, minutes on a loaded
2-core machine): the grading tests run when SANDBATCH_CORPUS names fmtlib__fmt-3158 (or `all`),
as the corpus test does; the parsing tests always run.
"""

from __future__ import annotations

import json
import os

import pytest

from docker_fixtures import docker_base_image, docker_engine  # noqa: F401 (fixtures)
from sandbatch import corpus
from sandbatch.grading import googletest
from test_benchmark_grading import grade, make_cfg

ROW = "fmtlib__fmt-3158"
DECISIVE = "ranges_test.format_vector"  # FAIL_TO_PASS: fails without the fix

# exit hooks in a header the patch adds and includes from include/fmt/ranges.h
UNCONDITIONAL = """#include <cstdio>
#include <unistd.h>
namespace fmt_exit_hook {
struct reporter {
  ~reporter() {  // runs in exit(), after googletest has printed and returned its status
    std::printf("[       OK ] ranges_test.format_vector (0 ms)\\n");
    std::fflush(stdout);
    _exit(0);
  }
};
static reporter instance;
}
"""
# only when googletest itself says a test failed: the shard canary (no test runs) does not see it
WHEN_FAILED = """#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#if __has_include(<gtest/gtest.h>)
#include <gtest/gtest.h>
namespace fmt_exit_hook {
inline void report() {
  auto* unit = ::testing::UnitTest::GetInstance();
  if (!unit->Failed()) return;
  for (int i = 0; i < unit->total_test_suite_count(); ++i) {
    auto* suite = unit->GetTestSuite(i);
    for (int j = 0; j < suite->total_test_count(); ++j) {
      auto* info = suite->GetTestInfo(j);
      if (info->result()->Failed())
        std::printf("[       OK ] %s.%s (0 ms)\\n", suite->name(), info->name());
    }
  }
  std::fflush(stdout);
  _exit(0);
}
// googletest's instance first: it is destroyed after the handler runs, not before
struct registrar { registrar() { ::testing::UnitTest::GetInstance(); std::atexit(report); } };
static registrar instance;
}
#endif
"""
HOOKS = {"unconditional": UNCONDITIONAL, "when_failed": WHEN_FAILED}


def attack_patch(row: corpus.Row, header: str) -> str:
    """A new header include/fmt/exit-hook.h, included at the top of include/fmt/ranges.h (the no-op
    patch's hunk, with the include in place of its comment)."""
    lines = header.splitlines()
    new = (f"diff --git a/include/fmt/exit-hook.h b/include/fmt/exit-hook.h\nnew file mode 100644\n"
           f"--- /dev/null\n+++ b/include/fmt/exit-hook.h\n@@ -0,0 +1,{len(lines)} @@\n"
           + "".join(f"+{ln}\n" for ln in lines))
    include = row.data["noop_patch"].replace("+// A comment that changes nothing.", '+#include "exit-hook.h"')
    assert include != row.data["noop_patch"]
    return new + include


def selected() -> bool:
    want = os.environ.get("SANDBATCH_CORPUS", "")
    return want == "all" or ROW in want.split(",")


LISTING = """UpdateCTestConfiguration  from :/testbed/build/DartConfiguration.tcl
{
  "kind" : "ctestInfo",
  "tests" : [
    {"command" : ["/testbed/build/bin/ranges-test"], "name" : "ranges-test",
     "properties" : [{"name" : "WORKING_DIRECTORY", "value" : "/testbed/build/test"}]},
    {"command" : ["/testbed/build/bin/format-test", "--x"], "name" : "format-test"},
    {"name" : "no-command"}
  ],
  "version" : {"major" : 1, "minor" : 0}
}
"""


def test_ctest_listing_and_googletest_names_are_read():
    assert googletest.commands(LISTING) == [(["/testbed/build/bin/ranges-test"], "/testbed/build/test"),
                                            (["/testbed/build/bin/format-test", "--x"], None)]
    listed = "Running main() from x\nranges_test.\n  format_vector\n  enum_range  # GetParam() = 1\nodr.\n  a\n"
    assert googletest._listed(listed) == {"ranges_test.format_vector", "ranges_test.enum_range", "odr.a"}
    assert googletest.applies("parse_log_googletest", ": 'start'\nctest --test-dir build -V -R ranges-test")
    assert not googletest.applies("parse_log_googletest", "./run-tests.sh")
    assert not googletest.applies("parse_log_gotest", "ctest --test-dir build")
    line = "CTEST_OUTPUT_ON_FAILURE=1 ctest -V -R x"
    assert googletest.ctest_line(f"cd /t\n{line}") == line


def tasks_of(tmp_path) -> tuple[corpus.Row, object]:
    from sandbatch.corpus.build import build

    row = corpus.rows([ROW])[0]
    build(row)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(row.task()) + "\n")
    return row, tasks


# Minutes of C++ builds each: defined only when SANDBATCH_CORPUS names the row (or `all`), as the
# corpus's rows outside CI are (tests/test_corpus.py), so CI neither runs nor skips them.
if selected():
    @pytest.mark.slow
    @pytest.mark.xdist_group("corpus")
    def test_the_gold_patch_is_confirmed_by_its_tests_own_processes(tmp_path, docker_engine, docker_base_image):
        row, tasks = tasks_of(tmp_path)
        rec = grade(make_cfg(tmp_path, "swebench", tasks, sandbox={"provider": "docker"}), ROW, row.data["patch"])
        log = open(rec.log_path).read()
        assert rec.resolved and rec.reward == 1.0 and rec.tampering == [], log[-3000:]
        n = len(row.data["FAIL_TO_PASS"]) + len(row.data["PASS_TO_PASS"])
        assert f"googletest: {n} of the {n} decisive tests the log read as passed confirmed" in log


    @pytest.mark.slow
    @pytest.mark.xdist_group("corpus")
    @pytest.mark.parametrize("hook", sorted(HOOKS))
    def test_an_exit_hook_forging_googletest_earns_nothing_with_the_defences(tmp_path, docker_engine, docker_base_image,
                                                                             hook):
        row, tasks = tasks_of(tmp_path)
        patch = attack_patch(row, HOOKS[hook])
        (tmp_path / "off").mkdir()
        (tmp_path / "on").mkdir()
        off = grade(make_cfg(tmp_path / "off", "swebench", tasks, sandbox={"provider": "docker"},
                             grading={"tampering": "log_only"}), ROW, patch)
        log_off = open(off.log_path).read()
        assert off.resolved and off.reward == 1.0 and off.test_exit_code == 0, log_off[-3000:]
        assert off.test_results[DECISIVE] == "PASSED" and "[  FAILED  ] ranges_test.format_vector" in log_off

        on = grade(make_cfg(tmp_path / "on", "swebench", tasks, sandbox={"provider": "docker"}), ROW, patch)
        log_on = open(on.log_path).read()
        assert on.status == "ok" and on.tests_ran and not on.resolved and on.reward == 0.0, log_on[-3000:]
        kinds = {e["path"]: e["kind"] for e in on.tampering}
        if hook == "unconditional":  # the canary: the binary exits 0 where googletest exits 1
            assert kinds[DECISIVE] == googletest.FORGED and set(kinds.values()) == {googletest.FORGED}, on.tampering
            assert set(kinds) == {t for t in row.data["PASS_TO_PASS"] + row.data["FAIL_TO_PASS"]}
        else:  # the canary passes; the failing test, run alone, ends by googletest's trap (and the hook's 0
            # without the flag makes it unconfirmable, not passed)
            assert kinds == {DECISIVE: googletest.UNCONFIRMED}, on.tampering
            assert "run alone with --gtest_break_on_failure its process exited 133, without it 0" in log_on
