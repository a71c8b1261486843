"""The answer an operation ended with."""

from __future__ import annotations

import json as jsonlib
from typing import Any, Optional

import httpx

from ._contract import Problem

__all__ = ["Response"]


class Response:
    """A definite answer to an operation: its status, headers and whole body, with the key it
    was sent under, how many attempts were sent (this one included), whether it is a replay of
    a stored answer, and its problem details if it has any.
    """

    __slots__ = ("http_response", "key", "attempts", "replayed", "problem")

    http_response: httpx.Response
    """The httpx response, its body read whole."""
    key: str
    """The idempotency key the operation was sent under (the key, not its header encoding)."""
    attempts: int
    replayed: bool
    problem: Optional[Problem]

    def __init__(
        self,
        http_response: httpx.Response,
        *,
        key: str,
        attempts: int,
        replayed: bool,
        problem: Optional[Problem],
    ) -> None:
        self.http_response = http_response
        self.key = key
        self.attempts = attempts
        self.replayed = replayed
        self.problem = problem

    @property
    def status_code(self) -> int:
        return self.http_response.status_code

    @property
    def headers(self) -> httpx.Headers:
        return self.http_response.headers

    @property
    def content(self) -> bytes:
        return self.http_response.content

    @property
    def text(self) -> str:
        return self.http_response.text

    @property
    def url(self) -> httpx.URL:
        return self.http_response.url

    def json(self, **kwargs: Any) -> Any:
        """The body parsed as JSON (``json.loads`` keyword arguments accepted)."""
        return jsonlib.loads(self.content, **kwargs)

    def __repr__(self) -> str:
        # No key: it can carry customer data.
        return (
            f"<Response [{self.status_code}] attempts={self.attempts} "
            f"replayed={self.replayed}>"
        )
