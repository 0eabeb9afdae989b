"""The run's console: Snakemake's own output made short, through its logger plugin interface.

Selected by the workflow's profile (`logger: [sandbatch]`; the plugin module is
`snakemake_logger_plugin_sandbatch`, which holds nothing but this handler). Snakemake's
complete log (`.snakemake/log/*.snakemake.log`) keeps every detail; the console gets:

- one line per job started (rule and rollout), one progress line per job finished, with
  the rollouts graded so far and an ETA (ProgressClock);
- a failed job as one line naming its log, and the last lines of that log;
- every other message cut to one screen line per line (no file lists of thousands of
  characters);
- last, the run's summary (logged by the workflow's end, sandbatch.reporting.summary) or,
  after Ctrl-C, one line saying what was interrupted and that the same command resumes.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from collections import defaultdict
from typing import Any, Optional

from snakemake_interface_logger_plugins.base import LogHandlerBase
from snakemake_interface_logger_plugins.common import LogEvent

from ..contracts.files import attempt_log
from ..core.util import duration_text

SUMMARY = "sandbatch_summary"  # a record carrying this attribute is the run's summary: printed last
WIDTH = 200  # characters of a console line; the complete log keeps the rest
LOG_TAIL = 5  # lines of a failed job's log shown
INTERRUPTED = "Terminating processes on user request"
# Snakemake's chatter that says nothing a user acts on (all of it stays in the complete log)
NOISE = re.compile("^(" + "|".join((
    r"Select jobs to execute\.\.\.", r"Execute \d+ jobs\.\.\.", r"Building DAG of jobs\.\.\.", r"Using shell: ",
    r"Provided cores: ", r"Rules claiming more threads", r"Provided resources: ", r"Assuming unrestricted shared",
    r"Trying to restart job ", r"Config file .* is extended by additional config", r"Waiting (for|at most)",
    r"Removing output files of failed job",
    r"Shutting down, this might take")) + ")")
DOTTED = "Config entry must start with a valid identifier"


def clip(line: str, width: int = WIDTH) -> str:
    return line if len(line) <= width else f"{line[:width - 30]}... (+{len(line) - width + 30} chars in the log)"


class ProgressClock:
    """The remaining time of a run from the jobs it has finished.

    Each rule's mean job duration (started -> finished, as the console sees them) times the
    jobs of it still to run, divided by the parallelism the run has shown so far (job-seconds
    done per second of wall time since the first job started). A rule not seen finishing
    yet counts as the mean job, a running job with what is left of its rule's mean. The
    console shows it once a rollout has been graded: before that the slowest step of a
    rollout may not have been seen at all."""

    def __init__(self) -> None:
        self.left: dict[str, int] = {}
        self.done_s: dict[str, list[float]] = defaultdict(list)
        self.running: dict[Any, tuple[str, float, str]] = {}  # jobid -> (rule, start, label)
        self.first_start: Optional[float] = None

    def planned(self, stats: dict[str, int]) -> None:
        self.left = {rule: n for rule, n in stats.items() if rule != "total"}

    def started(self, jobid: Any, rule: str, label: str, now: float) -> None:
        self.running[jobid] = (rule, now, label)
        if self.first_start is None:
            self.first_start = now

    def finished(self, jobid: Any, now: float) -> Optional[str]:
        rule, start, label = self.running.pop(jobid, (None, now, None))
        if rule is not None:
            self.done_s[rule].append(now - start)
            if self.left.get(rule, 0) > 0:
                self.left[rule] -= 1
        return label

    def failed(self, jobid: Any) -> Optional[str]:
        return self.running.pop(jobid, (None, 0.0, None))[2]

    def eta(self, now: float) -> Optional[float]:
        seen = [d for ds in self.done_s.values() for d in ds]
        if not seen or self.first_start is None or now <= self.first_start:
            return None
        mean_job = sum(seen) / len(seen)
        mean: dict[str, float] = {}
        for rule, n in self.left.items():
            durations = self.done_s.get(rule)
            mean[rule] = sum(durations) / len(durations) if durations else mean_job
        work = sum(n * mean[rule] for rule, n in self.left.items() if n > 0)
        # what the running jobs have done already
        work -= sum(min(now - start, mean.get(rule, 0.0)) for rule, start, _ in self.running.values())
        parallel = max(1.0, sum(seen) / (now - self.first_start))
        return max(0.0, work) / parallel


def _label(rule: str, wildcards: Any) -> str:
    wc = dict(wildcards or {})
    if "task" in wc and "repeat" in wc:
        return f"{rule} {wc.pop('task')}/{wc.pop('repeat')}" + "".join(f" {v}" for v in wc.values())
    return " ".join([rule, *map(str, wc.values())])


def _attempt(resources: Any) -> int:
    try:
        return int(getattr(resources, "attempt", None) or dict(resources).get("attempt") or 1)
    except (TypeError, ValueError):
        return 1


def _tail(path: str, n: int = LOG_TAIL) -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return [ln.rstrip("\n") for ln in fh.readlines()[-n:]]
    except OSError:
        return []


def dotted_config_fix(argv: list[str]) -> str:
    """The one-line fix for Snakemake refusing `--config a.b=c`: the nested form it takes."""
    entries, on = [], False
    for arg in argv:
        if arg.startswith("-"):
            on = arg == "--config" or arg == "-C"
            continue
        if on and "=" in arg and "." in arg.partition("=")[0]:
            entries.append(arg)
    fixes = []
    for entry in entries:
        key, _, value = entry.partition("=")
        head, *rest = key.split(".")
        nested = value
        for part in reversed(rest):
            nested = f"{{{part}: {nested}}}"
        fixes.append(f"'{head}={nested}'")
    entries = entries or ["harness.name=none"]
    fixes = fixes or ["'harness={name: none}'"]
    return (f"sandbatch: error: --config {' '.join(entries)}: Snakemake's --config takes no dotted keys; write "
            f"--config {' '.join(fixes)} instead, or run `sandbatch run {' '.join('--set ' + e for e in entries)}`")


class LogHandler(LogHandlerBase):
    """Snakemake's console stream handler for sandbatch runs (see the module's docstring)."""

    def __post_init__(self) -> None:
        s = self.common_settings
        self.stream = sys.stdout if getattr(s, "stdout", False) else sys.stderr
        self.progress = ProgressClock()
        self.attempts: dict[Any, int] = {}  # a running job's attempt number
        self.graded = 0
        self.rollouts: Optional[int] = None
        self.interrupted = False
        self.summary: list[str] = []
        self.closed = False

    # -- the plugin interface --------------------------------------------------------
    @property
    def writes_to_stream(self) -> bool:
        return True

    @property
    def writes_to_file(self) -> bool:
        return False

    @property
    def has_filter(self) -> bool:
        return True  # emit() decides; Snakemake's default filter would hide the summary under --quiet

    @property
    def has_formatter(self) -> bool:
        return True

    @property
    def needs_rulegraph(self) -> bool:
        return False

    def emit(self, record: logging.LogRecord) -> None:
        # errors to stderr even where Snakemake prints to stdout (a plan: -n)
        stream = sys.stderr if record.levelno >= logging.ERROR else self.stream
        try:
            for line in self.lines(record, time.time()):
                stream.write(line + "\n")
            stream.flush()
        except BrokenPipeError:
            raise
        except Exception:  # a console line must never stop the run
            self.handleError(record)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                for line in self.closing_lines():
                    self.stream.write(line + "\n")
                self.stream.flush()
            except (OSError, ValueError):
                pass
        super().close()

    # -- what is printed -------------------------------------------------------------
    def lines(self, record: logging.LogRecord, now: float) -> list[str]:
        s = self.common_settings
        event = getattr(record, "event", None)
        if getattr(record, SUMMARY, False):
            self.summary = record.getMessage().splitlines()
            return []
        if record.levelno < logging.INFO and not getattr(s, "verbose", False) and event != LogEvent.DEBUG_DAG:
            return []
        quiet = {getattr(q, "name", str(q)).upper() for q in (getattr(s, "quiet", None) or ())}
        if record.levelno < logging.WARNING and ("ALL" in quiet or (
                "RULES" in quiet and event == LogEvent.JOB_INFO) or ("PROGRESS" in quiet and event in (
                    LogEvent.JOB_FINISHED, LogEvent.RUN_INFO))):
            self.lines_unseen(record, event, now)
            return []
        message = record.getMessage() if event is None or isinstance(record.msg, str) else ""
        if event is None and message.startswith(INTERRUPTED):
            self.interrupted = True
            return []
        if self.interrupted and (record.levelno >= logging.WARNING or event in (
                LogEvent.JOB_ERROR, LogEvent.GROUP_ERROR, LogEvent.ERROR, LogEvent.JOB_FINISHED, LogEvent.PROGRESS)):
            return []  # the jobs the interruption stopped; the closing line says it once
        if event == LogEvent.WORKFLOW_STARTED or event == LogEvent.JOB_STARTED or event == LogEvent.RESOURCES_INFO:
            return []
        if event == LogEvent.RUN_INFO:
            return self._run_info(record, message)
        if event == LogEvent.JOB_INFO:
            return self._job_info(record, now)
        if event == LogEvent.JOB_FINISHED:
            return self._job_finished(record, now)
        if event == LogEvent.PROGRESS:
            return []  # said with the finished job (_job_finished)
        if event == LogEvent.JOB_ERROR:
            return self._job_error(record, now)
        if event == LogEvent.SHELLCMD:
            cmd = getattr(record, "shellcmd", None) or message
            return [clip(cmd.strip())] if getattr(s, "printshellcmds", False) and cmd else []
        if event == LogEvent.DEBUG_DAG and not getattr(s, "debug_dag", False):
            return []
        if event == LogEvent.ERROR and DOTTED in message:
            return [dotted_config_fix(sys.argv)]
        if record.levelno < logging.WARNING and NOISE.match(message):
            return []
        if message.startswith("RuleException:\nCalledProcessError in file"):
            return []  # a step's nonzero exit: its FAILED line follows, with the tail of its log
        if message.startswith("Using workflow specific profile") or message.startswith("Using profile"):
            return []
        return [clip(line) for line in message.splitlines() if line.strip()]

    def lines_unseen(self, record: logging.LogRecord, event: Any, now: float) -> None:
        """What a line kept quiet (--quiet) tells: the jobs running, for the closing line."""
        if event == LogEvent.JOB_INFO:
            self._job_info(record, now)
        elif event == LogEvent.JOB_FINISHED:
            self._job_finished(record, now)
        elif event is None and record.getMessage().startswith(INTERRUPTED):
            self.interrupted = True

    def closing_lines(self) -> list[str]:
        if self.interrupted:
            stopped = sorted(label for _, _, label in self.progress.running.values() if label)
            what = (f"{len(stopped)} running step(s) stopped ({', '.join(stopped[:4])}"
                    f"{', ...' if len(stopped) > 4 else ''})") if stopped else "no step was running"
            return [f"sandbatch: interrupted: {what}; finished steps are kept, and the same command resumes the run"]
        return self.summary

    def _run_info(self, record: logging.LogRecord, message: str) -> list[str]:
        stats = getattr(record, "stats", None)
        if not isinstance(stats, dict) or getattr(self.common_settings, "dryrun", False):
            return [clip(line) for line in message.splitlines() if line.strip()]
        self.progress.planned(stats)
        self.rollouts = stats.get("grade")
        parts = ", ".join(f"{rule} {n}" for rule, n in stats.items() if rule not in ("total", "all"))
        return [f"{stats.get('total', 0)} steps to run: {parts}"]

    def _job_info(self, record: logging.LogRecord, now: float) -> list[str]:
        rule = getattr(record, "rule_name", "?")
        label = _label(rule, getattr(record, "wildcards", None))
        self.progress.started(getattr(record, "jobid", None), rule, label, now)
        if getattr(self.common_settings, "dryrun", False):
            return [f"would run {label}"]
        if rule == "all":
            return []
        attempt = _attempt(getattr(record, "resources", None))
        self.attempts[getattr(record, "jobid", None)] = attempt
        return [f"[{time.strftime('%H:%M:%S', time.localtime(now))}] {label}"
                + (f" (attempt {attempt})" if attempt > 1 else "")]

    def _job_finished(self, record: logging.LogRecord, now: float) -> list[str]:
        jobid = getattr(record, "job_id", None)
        rule = self.progress.running.get(jobid, ("",))[0]
        label = self.progress.finished(jobid, now)
        if rule == "grade":
            self.graded += 1
        done = sum(len(d) for d in self.progress.done_s.values())
        total = done + sum(max(0, n) for n in self.progress.left.values())
        eta = self.progress.eta(now) if self.graded or not self.rollouts else None
        graded = f", {self.graded}/{self.rollouts} rollouts graded" if self.rollouts else ""
        left = duration_text(eta) if eta is not None else "after the first graded rollout"
        return [f"[{time.strftime('%H:%M:%S', time.localtime(now))}] done {label or rule}: "
                f"{done}/{total} steps{graded}, ETA {left}"]

    def _job_error(self, record: logging.LogRecord, now: float) -> list[str]:
        jobid = getattr(record, "jobid", None)
        label = self.progress.failed(jobid) or getattr(record, "rule_name", "?")
        logs = list(getattr(record, "log", None) or [])
        out = [f"[{time.strftime('%H:%M:%S', time.localtime(now))}] FAILED {label}"
               + (f"; log: {logs[0]}" if logs else "")]
        attempt = self.attempts.pop(jobid, None)
        if getattr(self.common_settings, "show_failed_logs", False) and logs:
            shown = _tail(logs[0])
            # the step's own copy of its reason, in case the retry has emptied its log already
            kept = _tail(str(attempt_log(logs[0], attempt))) if attempt else []
            out += ["    " + clip(line) for line in shown + [k for k in kept if k not in shown]]
        return out

