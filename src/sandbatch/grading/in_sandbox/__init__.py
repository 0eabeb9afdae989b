"""The grader's code that runs inside the sandbox, uploaded as files (never imported here):

- pytest_plugin.py: the pytest plugin of the verdict channel (each test's raw call result);
- unittest_plugin.py: the same for unittest runners, loaded as `sitecustomize`;
- channel_writer.py: the verdict channel's writing end, shared by both plugins;
- run_checks.py: the plugins' checks of the tests themselves (tests replaced, vacuous
  assertions, the assertion machinery replaced);
- startup_probe.py: what an interpreter runs at start-up, listed without running it;
- startup_tracker.py: the pytest channel's sitecustomize: what runs before its plugin, recorded
  from the interpreter's start-up (and the unittest plugin's chaining to the image's own).

Each must run on any Python 3 a task image may hold (no annotations, no f-strings, only the
standard library) and imports nothing of sandbatch. The host code that uploads them and reads
what they wrote is in grading/ (verdict.py, unittest_verdict.py, build_phase.py).
"""

from pathlib import Path

HERE = Path(__file__).parent  # where the files to upload are read from
