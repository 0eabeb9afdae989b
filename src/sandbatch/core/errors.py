"""Error hierarchy.

UserError: bad input a user can fix; printed as one line, never with a traceback. Independent
mistakes found together (every missing setting of a config) are one line each (Collector).
InfraError: the machinery failed (sandbox, image, network, grader crash); retried by
Snakemake while attempts remain, then recorded as `infra_error` in the rollout.
"""

from contextlib import contextmanager
from typing import Iterator


class SandbatchError(Exception):
    """Base of every error this package raises on purpose."""


class UserError(SandbatchError):
    """Bad input: the message names the file, the field, the value and the fix."""


class Collector:
    """Runs independent checks and keeps every UserError they raise, so a user learns all
    that is missing in one try: `with errors.check(): ...` for each, then `errors.raise_any()`."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    @contextmanager
    def check(self) -> Iterator[None]:
        try:
            yield
        except UserError as exc:
            self.messages += str(exc).splitlines()

    def raise_any(self) -> None:
        if self.messages:
            raise UserError("\n".join(dict.fromkeys(self.messages)))


def error_lines(exc: UserError) -> list[str]:
    """How a UserError is printed: `sandbatch: error: ...`, one line per mistake."""
    return [f"sandbatch: error: {line}" for line in str(exc).splitlines() or [""]]


class InfraError(SandbatchError):
    """Infrastructure failure; `failure_class` says which part failed."""

    def __init__(self, message: str, failure_class: str = "infra"):
        super().__init__(message)
        self.failure_class = failure_class
