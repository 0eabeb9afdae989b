"""Error hierarchy.

UserError: bad input a user can fix; printed as one line, never with a traceback. Independent
mistakes found together (every missing setting of a config) are one line each (Collector).
InfraError: the machinery failed (sandbox, image, network, grader crash); retried by
Snakemake while attempts remain, then recorded as `infra_error` in the rollout.
"""

from contextlib import contextmanager
from typing import Callable, Iterator

from .failures import FailureClass


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


class Collector:
    """Runs independent checks and keeps every UserError they raise, so a user learns all
    that is missing in one try: `with errors.check(): ...` for each, then `errors.raise_any()`."""

    def __init__(self, locate: Callable[[UserError], UserError] | None = None) -> None:
        self.messages: list[str] = []
        self.locate = locate  # names the config file that sets an error's key

    @contextmanager
    def check(self) -> Iterator[None]:
        try:
            yield
        except UserError as exc:
            self.messages += str(self.locate(exc) if self.locate else exc).splitlines()

    def raise_any(self) -> None:
        if self.messages:
            raise UserError("\n".join(dict.fromkeys(self.messages)))


def error_lines(exc: UserError) -> list[str]:
    """How a UserError is printed: `sandbatch: error: ...`, one line per mistake."""
    return [f"sandbatch: error: {line}" for line in str(exc).splitlines() or [""]]


class InfraError(SandbatchError):
    """Infrastructure failure; `failure_class` says which part failed. `final`: no later attempt
    of the step can do better (what it needed went with this one), only a rerun of the rollout."""

    def __init__(self, message: str, failure_class: FailureClass = FailureClass.INFRA, *, final: bool = False):
        super().__init__(message)
        self.failure_class = failure_class
        self.final = final
