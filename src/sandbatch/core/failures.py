"""Every failure class a rollout's records can name, in one enumeration.

A record's `failure_class` says what went wrong (`status` says how it ended). Each class is a
member here, with its meaning and its kind: the machinery (`infra`) and the model endpoint
(`model`) never earn a reward, as the rollout says nothing about the agent; the agent's own
failures (`agent`) and the grade's findings (`grade`) are the agent's result. The members are
strings, so records on disk hold the same values as ever; docs/outputs.md lists them
(tests/test_failures.py keeps that list equal to this one).
"""

from __future__ import annotations

from enum import StrEnum


class FailureKind(StrEnum):
    INFRA = "infra"  # the machinery failed: sandbox, image, network, proxy, grader
    MODEL = "model"  # the model endpoint failed the agent (an outage, not the agent's doing)
    AGENT = "agent"  # the agent failed: its exit, its limits, its errors
    GRADE = "grade"  # the agent finished but its patch did not pass grading


class FailureClass(StrEnum):
    kind: FailureKind
    meaning: str

    def __new__(cls, value: str, kind: FailureKind, meaning: str) -> "FailureClass":
        member = str.__new__(cls, value)
        member._value_ = value
        member.kind = kind
        member.meaning = meaning
        return member

    @property
    def infra(self) -> bool:
        """True for an infrastructure or model-endpoint failure: never a reward."""
        return self.kind in (FailureKind.INFRA, FailureKind.MODEL)

    # --- the machinery ----------------------------------------------------------------------
    INFRA = "infra", FailureKind.INFRA, "an infrastructure failure no narrower class names"
    SANDBOX = "sandbox", FailureKind.INFRA, "the sandbox provider or its engine failed (engine down, a delete refused)"
    SANDBOX_API = "sandbox_api", FailureKind.INFRA, "the sandbox service's API call failed"
    SANDBOX_AUTH = "sandbox_auth", FailureKind.INFRA, "the sandbox service refused its key"
    SANDBOX_CREATE = "sandbox_create", FailureKind.INFRA, "a sandbox could not be created in time"
    SANDBOX_EXEC = "sandbox_exec", FailureKind.INFRA, "a command could not be run in the sandbox, or its processes stopped"
    SANDBOX_FILE = "sandbox_file", FailureKind.INFRA, "a file could not be read from or written to the sandbox"
    SANDBOX_NETWORK = "sandbox_network", FailureKind.INFRA, "the sandbox's network could not be restricted or reached"
    SANDBOX_OOM = "sandbox_oom", FailureKind.INFRA, "the kernel's OOM killer stopped the sandbox (its memory limit)"
    SANDBOX_PREPARE = "sandbox_prepare", FailureKind.INFRA, "preparing the sandbox's repository or image failed"
    SANDBOX_PROBE = "sandbox_probe", FailureKind.INFRA, "a new sandbox failed its readiness probe"
    SANDBOX_REAP = "sandbox_reap", FailureKind.INFRA, "sandboxes left behind could not be deleted"
    IMAGE = "image", FailureKind.INFRA, "the task's image is missing and cannot be pulled"
    IMAGE_BUILD = "image_build", FailureKind.INFRA, "building a corpus row's image failed"
    CORPUS_LISTS = "corpus_lists", FailureKind.INFRA, "a corpus row's test lists could not be derived"
    HARNESS_INSTALL = "harness_install", FailureKind.INFRA, "installing the harness in the sandbox failed or took too long"
    PROXY = "proxy", FailureKind.INFRA, "the rollout's model proxy could not start"
    PATCH_EXTRACT = "patch_extract", FailureKind.INFRA, "the agent's patch could not be taken from the sandbox"
    GRADE_TIMEOUT = "grade_timeout", FailureKind.INFRA, "grading took longer than timeouts.grade"
    GRADER_CRASH = "grader_crash", FailureKind.INFRA, "the grader crashed"
    GRADING_NO_REWARD = "grading_no_reward", FailureKind.INFRA, "the Terminal-Bench verifier wrote no valid reward"
    GRADING_ROOTDIR = "grading_rootdir", FailureKind.INFRA, "pytest took a rootdir outside the workdir"
    GRADING_UNSUPPORTED = "grading_unsupported", FailureKind.INFRA, "the grader does not support the task's repository"
    TEST_PATCH_APPLY_FAILED = ("test_patch_apply_failed", FailureKind.INFRA,
                               "the task's test patch did not apply over the agent's patch")
    TEST_SETUP_FAILED = "test_setup_failed", FailureKind.INFRA, "the task's test setup failed before the tests ran"
    TAMPER_RESTORE_FAILED = ("tamper_restore_failed", FailureKind.INFRA,
                             "files the patch changed could not be restored before the tests")

    # --- the model endpoint (docs/proxy.md, "When the model endpoint fails") ---------------
    MODEL = "model", FailureKind.MODEL, "the model endpoint failed the rollout's proxy"
    MODEL_UNREACHABLE = ("model_unreachable", FailureKind.MODEL,
                         "no connection to model.base_url: refused, reset, DNS or TLS failure, connect timeout")
    MODEL_UNAVAILABLE = ("model_unavailable", FailureKind.MODEL,
                         "the endpoint answered 5xx or 429 after the proxy's retries, broke off its answer, or "
                         "sent nothing within model.proxy.read_timeout")
    MODEL_AUTH = "model_auth", FailureKind.MODEL, "the endpoint refused the key: 401 or 403"
    MODEL_NOT_FOUND = "model_not_found", FailureKind.MODEL, "the endpoint does not serve the model asked for (404)"
    MODEL_CONTEXT_WINDOW = ("model_context_window", FailureKind.MODEL,
                            "the endpoint did not tell the model's context window, which the harness needs")

    # --- the agent ----------------------------------------------------------------------------
    AGENT_EXIT = "agent_exit", FailureKind.AGENT, "the agent exited non-zero"
    AGENT_TIMEOUT = "agent_timeout", FailureKind.AGENT, "the agent ran past timeouts.agent"
    AGENT_TIME_LIMIT = "agent_time_limit", FailureKind.AGENT, "the agent stopped at its own time limit"
    AGENT_EXCEPTION = "agent_exception", FailureKind.AGENT, "the agent ended on an exception of its own"
    AGENT_ERROR_EVENT = "agent_error_event", FailureKind.AGENT, "the agent reported an error event"
    STEP_LIMIT = "step_limit", FailureKind.AGENT, "the agent stopped at its step or cost limit"
    FORMAT_ERROR = "format_error", FailureKind.AGENT, "the model's answers kept breaking the agent's format"
    NO_TRAJECTORY = "no_trajectory", FailureKind.AGENT, "the agent exited 0 without writing its trajectory"
    NO_REFERENCE_SOLUTION = "no_reference_solution", FailureKind.AGENT, "the oracle found no reference solution"

    # --- the grade ----------------------------------------------------------------------------
    EMPTY_PATCH = "empty_patch", FailureKind.GRADE, "the agent changed nothing"
    PATCH_APPLY_FAILED = "patch_apply_failed", FailureKind.GRADE, "the agent's patch did not apply to a fresh checkout"
    TESTS_TIMEOUT = "tests_timeout", FailureKind.GRADE, "the tests ran past their time"
    TESTS_DID_NOT_RUN = "tests_did_not_run", FailureKind.GRADE, "the tests did not run (no results found)"
    TESTS_INCONCLUSIVE = "tests_inconclusive", FailureKind.GRADE, "the tests gave no conclusive result after the retries"
    TEST_LOG_INCONSISTENT = ("test_log_inconsistent", FailureKind.GRADE,
                             "the test log claims no failure while the test command failed")
    TAMPERING = "tampering", FailureKind.GRADE, "the patch changed what grades it (grading.tampering: fail)"
    SUSPICIOUS = "suspicious", FailureKind.GRADE, "the patch's code reaches into the test runner (grading.suspicious: fail)"


def docs_table() -> str:
    """The Markdown table of every class, as docs/outputs.md holds it."""
    rows = ["| class | kind | meaning |", "|---|---|---|"]
    rows += [f"| `{f.value}` | {f.kind.value} | {f.meaning} |" for f in FailureClass]
    return "\n".join(rows)
