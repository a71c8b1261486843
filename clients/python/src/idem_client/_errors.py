"""The errors of the idem client.

No error's ``str()`` or ``repr()`` contains the idempotency key: a caller-given key can carry
customer data (an order number, a message id). The key is an attribute, to resume with or to log
on purpose.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal, Optional

if TYPE_CHECKING:
    from ._contract import Problem
    from ._response import Response

__all__ = ["IdemError", "InvalidKey", "GaveUp", "OutcomeUnknown", "Mismatch"]


class IdemError(Exception):
    """The base class of the errors this client raises about an operation."""


class InvalidKey(IdemError, ValueError):
    """The caller's key breaks the key syntax (1 to 255 characters, each in 0x20–0x7E).

    Nothing was sent.
    """


class GaveUp(IdemError):
    """No definite answer: every attempt failed in a retryable way, until ``max_attempts`` or the
    deadline. The operation may or may not have happened; sending it again under the same
    ``key`` is safe, and finds out.
    """

    key: str
    attempts: int
    reason: Literal["max_attempts", "deadline"]
    last_response: Optional[Response]
    last_exception: Optional[Exception]

    def __init__(
        self,
        *,
        key: str,
        attempts: int,
        reason: Literal["max_attempts", "deadline"],
        last_response: Optional[Response] = None,
        last_exception: Optional[Exception] = None,
    ) -> None:
        if last_response is not None:
            last = f"the last attempt was answered {last_response.status_code}"
        elif last_exception is not None:
            last = f"the last attempt got no answer ({type(last_exception).__name__})"
        else:
            last = "no attempt failed"
        because = "the attempts ran out" if reason == "max_attempts" else "the deadline is near"
        super().__init__(
            f"gave up after {attempts} attempt(s), {because} ({reason}); {last}; "
            "the operation may have happened: send it again under the same key to find out"
        )
        self.key = key
        self.attempts = attempts
        self.reason = reason
        self.last_response = last_response
        self.last_exception = last_exception


class _FinalAnswer(IdemError):
    """A final answer that is no result: the server's problem, raised at once, not retried.
    Each kind says what happened in ``_message`` (formatted with the attempts)."""

    _message: ClassVar[str]
    key: str
    attempts: int
    response: Response
    problem: Optional[Problem]

    def __init__(
        self, *, key: str, attempts: int, response: Response, problem: Optional[Problem]
    ) -> None:
        super().__init__(self._message.format(attempts=attempts))
        self.key = key
        self.attempts = attempts
        self.response = response
        self.problem = problem


class OutcomeUnknown(_FinalAnswer):
    """Final: the request reached the API and its result was lost on the server's side
    (a ``500`` problem ``urn:idem:problem:outcome-unknown``). The operation may or may not have
    taken effect; every retry under this key gets the same answer until the record expires.
    """

    _message = (
        "outcome unknown after {attempts} attempt(s): the server lost the operation's "
        "result, which may or may not have taken effect; reconcile it with the API"
    )


class Mismatch(_FinalAnswer):
    """The key was already used for a different request (a ``422`` problem
    ``urn:idem:problem:fingerprint-mismatch``): a bug in the caller, which must use one key per
    logical operation.
    """

    _message = (
        "the idempotency key was used for a different request (after {attempts} "
        "attempt(s)): use one key per logical operation"
    )
