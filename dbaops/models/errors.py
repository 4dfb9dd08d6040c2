"""Errors of the model layer.

``InfraError`` means the model endpoint could not serve the call (rate limits, server errors,
timeouts, refused connections) even after bounded retries: a run that hits it ends as
``infra_error``, never as an agent failure. ``ModelRequestError`` is a non-retried 4xx answer
(other than 429): the request itself was refused (bad request, auth, unknown model, context
overflow). ``ModelConfigError`` covers the registry and missing credentials.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dbaops.record.kinds import CallRecord


class ModelError(Exception):
    """Base class of all model-layer errors."""


class ModelConfigError(ModelError, ValueError):
    """The model registry or a model's credentials are invalid or incomplete."""


class UnknownModelError(ModelConfigError):
    """A model name (or role) that the registry does not define."""

    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        self.known = known
        super().__init__(f"unknown model {name!r}; known models: {', '.join(known) or '(none)'}")


class ModelCallError(ModelError):
    """A model call that failed; ``record`` is the call's accounting record (no secrets)."""

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        attempts: int = 1,
        record: CallRecord | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.attempts = attempts
        self.record = record


class InfraError(ModelCallError):
    """The endpoint was unreachable or kept failing after bounded retries (run: infra_error)."""


class ModelRequestError(ModelCallError):
    """The endpoint refused the request with a non-retryable 4xx status (not retried)."""
