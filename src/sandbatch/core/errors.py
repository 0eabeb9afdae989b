"""Error hierarchy.

UserError: bad input a user can fix; printed as one line, never with a traceback.
InfraError: the machinery failed (sandbox, image, network, grader crash); retried by
Snakemake while attempts remain, then recorded as `infra_error` in the rollout.
"""


class SandbatchError(Exception):
    """Base of every error this package raises on purpose."""


class UserError(SandbatchError):
    """Bad input: the message names the file, the field, the value and the fix.

    `key`: the config key at fault (dotted) when the message leaves it to the caller to name
    it with the file that sets it (sandbatch.ops.workflow.preflight); str() then starts with it.
    """

    def __init__(self, message: str, key: str | None = None):
        super().__init__(f"{key}: {message}" if key else message)
        self.key = key
        self.detail = message


class InfraError(SandbatchError):
    """Infrastructure failure; `failure_class` says which part failed."""

    def __init__(self, message: str, failure_class: str = "infra"):
        super().__init__(message)
        self.failure_class = failure_class
