"""The clients: each logical operation is sent under one idempotency key, with the same body
bytes on every attempt, and retried until it gets a definite answer, ``max_attempts`` or the
deadline.
"""

from __future__ import annotations

import asyncio
import json as jsonlib
import math
import random as randomlib
import time
import uuid
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Awaitable, Callable, Iterator, Literal, Optional, Type, Union

import httpx

from ._contract import (
    HeadersLike,
    Problem,
    classify,
    encode_key,
    is_replayed,
    parse_problem,
)
from ._errors import GaveUp, Mismatch, OutcomeUnknown
from ._response import Response

__all__ = ["Client", "AsyncClient", "DEFAULT_KEY_HEADER", "RETRYABLE_TRANSPORT_ERRORS"]

DEFAULT_KEY_HEADER = "Idempotency-Key"

RETRYABLE_TRANSPORT_ERRORS = (
    httpx.TimeoutException,  # connect, write, read or pool timeout, or the attempt's own
    httpx.NetworkError,  # connection refused or failed, read or write failed
    httpx.RemoteProtocolError,  # the connection broke before the whole answer
    httpx.ProxyError,
)
"""The failures of an attempt that got no answer, and are retried. Others (an unsupported
scheme, a malformed request) are the caller's and propagate at once."""

Content = Union[bytes, str]


@dataclass(frozen=True)
class _Settings:
    max_attempts: int
    deadline: float
    attempt_timeout: float
    initial_backoff: float
    max_backoff: float
    key_header: str

    @staticmethod
    def of(
        *,
        max_attempts: int,
        deadline: float,
        attempt_timeout: float,
        initial_backoff: float,
        max_backoff: float,
        key_header: str,
    ) -> _Settings:
        for name, value in (
            ("deadline", deadline),
            ("attempt_timeout", attempt_timeout),
            ("initial_backoff", initial_backoff),
            ("max_backoff", max_backoff),
        ):
            if math.isnan(value) or value < 0:
                raise ValueError(f"{name} must be a number of seconds, 0 or more")
        if not key_header:
            raise ValueError("key_header cannot be empty")
        return _Settings(
            max_attempts=max(1, max_attempts),
            deadline=float(deadline),
            attempt_timeout=float(attempt_timeout),
            initial_backoff=float(initial_backoff),
            max_backoff=float(max_backoff),
            key_header=key_header,
        )


@dataclass(frozen=True)
class _Operation:
    method: str
    url: Union[httpx.URL, str]
    body: Optional[bytes]
    headers: httpx.Headers
    key: str
    header_value: str


class _Base:
    _settings: _Settings
    _random: Callable[[], float]
    _clock: Callable[[], float]

    def __init__(
        self,
        *,
        max_attempts: int,
        deadline: float,
        attempt_timeout: float,
        initial_backoff: float,
        max_backoff: float,
        key_header: str,
        random: Optional[Callable[[], float]],
        clock: Optional[Callable[[], float]],
    ) -> None:
        self._settings = _Settings.of(
            max_attempts=max_attempts,
            deadline=deadline,
            attempt_timeout=attempt_timeout,
            initial_backoff=initial_backoff,
            max_backoff=max_backoff,
            key_header=key_header,
        )
        self._random = randomlib.random if random is None else random
        self._clock = time.monotonic if clock is None else clock

    @property
    def key_header(self) -> str:
        return self._settings.key_header

    def _operation(
        self,
        method: str,
        url: Union[httpx.URL, str],
        *,
        json: Any,
        content: Optional[Content],
        headers: Optional[HeadersLike],
        key: Optional[str],
    ) -> _Operation:
        # The key is checked first: an invalid one fails before anything is sent.
        if key is None:
            key = str(uuid.uuid4())
        header_value = encode_key(key)
        if json is not None and content is not None:
            raise TypeError("give json or content, not both")
        merged = httpx.Headers(headers)
        body: Optional[bytes]
        if json is not None:
            # Serialized once: every attempt sends these same bytes.
            body = jsonlib.dumps(
                json, ensure_ascii=False, separators=(",", ":"), allow_nan=False
            ).encode("utf-8")
            if "content-type" not in merged:
                merged["Content-Type"] = "application/json"
        elif isinstance(content, str):
            body = content.encode("utf-8")
        elif content is None or isinstance(content, bytes):
            body = content
        else:
            raise TypeError(
                "content must be bytes or str: every attempt sends the same bytes, "
                "so the body is held whole"
            )
        return _Operation(
            method=method.upper(),
            url=url,
            body=body,
            headers=merged,
            key=key,
            header_value=header_value,
        )

    def _timeout(self, start: float) -> float:
        remaining = self._settings.deadline - (self._clock() - start)
        return max(0.0, min(self._settings.attempt_timeout, remaining))

    def _build(self, http: Union[httpx.Client, httpx.AsyncClient], op: _Operation, timeout: float) -> httpx.Request:
        request = http.build_request(
            op.method,
            op.url,
            content=op.body,
            headers=op.headers,
            timeout=httpx.Timeout(timeout),
        )
        # The key header belongs to the client: any value the caller (or the httpx client's
        # default headers) set under that name, in any case, is replaced.
        request.headers[self._settings.key_header] = op.header_value
        return request

    def _next(
        self,
        op: _Operation,
        attempts: int,
        start: float,
        outcome: Union[httpx.Response, Exception],
    ) -> Union[Response, float]:
        """What follows an attempt's outcome (its answer, or the transport error it got
        instead): the response to return, or the wait before the next attempt; or it raises
        the contract's error (:class:`Mismatch`, :class:`OutcomeUnknown`, :class:`GaveUp`)."""
        last_response: Optional[Response] = None
        last_exception: Optional[Exception] = None
        retry_after: Optional[float] = None
        if isinstance(outcome, Exception):
            last_exception = outcome
        else:
            content, headers = outcome.content, outcome.headers
            verdict = classify(outcome.status_code, headers, content)
            response = Response(
                outcome,
                key=op.key,
                attempts=attempts,
                replayed=is_replayed(headers),
                problem=parse_problem(headers, content),
            )
            if verdict.action == "return":
                return response
            if verdict.action == "raise":
                problem: Optional[Problem] = parse_problem(headers, content, any_content_type=True)
                error = Mismatch if verdict.error == "mismatch" else OutcomeUnknown
                raise error(key=op.key, attempts=attempts, response=response, problem=problem)
            last_response, retry_after = response, verdict.retry_after

        settings = self._settings
        reason: Optional[Literal["max_attempts", "deadline"]] = None
        wait = 0.0
        if attempts >= settings.max_attempts:
            reason = "max_attempts"
        else:
            # Full jitter: uniform in [0, min(max_backoff, initial_backoff * 2^(n-1))].
            exponent = min(attempts - 1, 1000)
            bound = min(settings.max_backoff, settings.initial_backoff * 2.0**exponent)
            wait = bound * self._random()
            if retry_after is not None:
                wait = max(wait, retry_after)
            if (self._clock() - start) + wait >= settings.deadline:
                reason = "deadline"
        if reason is not None:
            raise GaveUp(
                key=op.key,
                attempts=attempts,
                reason=reason,
                last_response=last_response,
                last_exception=last_exception,
            ) from last_exception
        return wait


class _TimedStream(httpx.SyncByteStream):
    """A response body that fails with a timeout when a chunk arrives after the attempt's time
    is up: the sync client's bound on the whole body."""

    def __init__(
        self,
        inner: httpx.SyncByteStream,
        *,
        began: float,
        timeout: float,
        clock: Callable[[], float],
        request: httpx.Request,
    ) -> None:
        self._inner = inner
        self._began = began
        self._timeout = timeout
        self._clock = clock
        self._request = request

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._inner:
            if self._clock() - self._began > self._timeout:
                raise httpx.ReadTimeout(
                    "the attempt took longer than its timeout", request=self._request
                )
            yield chunk

    def close(self) -> None:
        self._inner.close()


def _shrink_read_timeout(request: httpx.Request, seconds: float) -> None:
    # Best effort: httpcore reads the body's read timeout from the request when the body
    # starts, so that no single read of the body waits past the attempt's end.
    timeouts = request.extensions.get("timeout")
    if isinstance(timeouts, dict) and timeouts.get("read") is not None:
        timeouts["read"] = max(seconds, 0.0)


class Client(_Base):
    """A synchronous client. Each call is one logical operation under one idempotency key.

    >>> with Client(deadline=20.0) as client:
    ...     response = client.post("http://localhost:8080/charges", json={"amount": 1000})
    """

    def __init__(
        self,
        *,
        max_attempts: int = 5,
        deadline: float = 30.0,
        attempt_timeout: float = 10.0,
        initial_backoff: float = 0.1,
        max_backoff: float = 5.0,
        key_header: str = DEFAULT_KEY_HEADER,
        http: Optional[httpx.Client] = None,
        sleep: Optional[Callable[[float], None]] = None,
        clock: Optional[Callable[[], float]] = None,
        random: Optional[Callable[[], float]] = None,
    ) -> None:
        """
        :param max_attempts: attempts at most, the first included (0 counts as 1).
        :param deadline: seconds for all attempts and waits together.
        :param attempt_timeout: seconds for one attempt: connecting, the head and the body.
        :param initial_backoff: the bound, in seconds, of the first wait.
        :param max_backoff: the largest bound of a wait (a ``Retry-After`` may ask for more).
        :param key_header: the header carrying the key.
        :param http: the httpx client to send with (redirects are never followed); by default
            one this client creates, and closes.
        :param sleep: waits that many seconds (``time.sleep``).
        :param clock: monotonic seconds (``time.monotonic``).
        :param random: a number in [0, 1) for the jitter (``random.random``).
        """
        super().__init__(
            max_attempts=max_attempts,
            deadline=deadline,
            attempt_timeout=attempt_timeout,
            initial_backoff=initial_backoff,
            max_backoff=max_backoff,
            key_header=key_header,
            random=random,
            clock=clock,
        )
        self._owns_http = http is None
        self._http = httpx.Client(follow_redirects=False) if http is None else http
        self._sleep = time.sleep if sleep is None else sleep

    def close(self) -> None:
        """Close the httpx client, if this client created it."""
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    def request(
        self,
        method: str,
        url: Union[httpx.URL, str],
        *,
        json: Any = None,
        content: Optional[Content] = None,
        headers: Optional[HeadersLike] = None,
        key: Optional[str] = None,
    ) -> Response:
        """Send one operation under one key (``key``, or a random UUID v4) until it gets a
        definite answer.

        :raises InvalidKey: ``key`` breaks the key syntax; nothing was sent.
        :raises GaveUp: no definite answer within ``max_attempts`` or the deadline.
        :raises OutcomeUnknown: the server lost the operation's result, for good.
        :raises Mismatch: the key was used for a different request.
        """
        op = self._operation(method, url, json=json, content=content, headers=headers, key=key)
        start = self._clock()
        attempts = 0
        while True:
            attempts += 1
            outcome: Union[httpx.Response, Exception]
            try:
                outcome = self._attempt(op, self._timeout(start))
            except RETRYABLE_TRANSPORT_ERRORS as error:
                outcome = error
            step = self._next(op, attempts, start, outcome)
            if isinstance(step, Response):
                return step
            self._sleep(step)

    def _attempt(self, op: _Operation, timeout: float) -> httpx.Response:
        began = self._clock()
        request = self._build(self._http, op, timeout)
        response = self._http.send(request, stream=True, follow_redirects=False)
        try:
            if isinstance(response.stream, httpx.SyncByteStream):
                _shrink_read_timeout(request, timeout - (self._clock() - began))
                response.stream = _TimedStream(
                    response.stream,
                    began=began,
                    timeout=timeout,
                    clock=self._clock,
                    request=request,
                )
            response.read()
        finally:
            response.close()
        return response

    def post(
        self,
        url: Union[httpx.URL, str],
        *,
        json: Any = None,
        content: Optional[Content] = None,
        headers: Optional[HeadersLike] = None,
        key: Optional[str] = None,
    ) -> Response:
        return self.request("POST", url, json=json, content=content, headers=headers, key=key)

    def put(
        self,
        url: Union[httpx.URL, str],
        *,
        json: Any = None,
        content: Optional[Content] = None,
        headers: Optional[HeadersLike] = None,
        key: Optional[str] = None,
    ) -> Response:
        return self.request("PUT", url, json=json, content=content, headers=headers, key=key)

    def patch(
        self,
        url: Union[httpx.URL, str],
        *,
        json: Any = None,
        content: Optional[Content] = None,
        headers: Optional[HeadersLike] = None,
        key: Optional[str] = None,
    ) -> Response:
        return self.request("PATCH", url, json=json, content=content, headers=headers, key=key)

    def delete(
        self,
        url: Union[httpx.URL, str],
        *,
        json: Any = None,
        content: Optional[Content] = None,
        headers: Optional[HeadersLike] = None,
        key: Optional[str] = None,
    ) -> Response:
        return self.request("DELETE", url, json=json, content=content, headers=headers, key=key)


class AsyncClient(_Base):
    """An asyncio client. Each call is one logical operation under one idempotency key.

    >>> async with AsyncClient(deadline=20.0) as client:
    ...     response = await client.post("http://localhost:8080/charges", json={"amount": 1})
    """

    def __init__(
        self,
        *,
        max_attempts: int = 5,
        deadline: float = 30.0,
        attempt_timeout: float = 10.0,
        initial_backoff: float = 0.1,
        max_backoff: float = 5.0,
        key_header: str = DEFAULT_KEY_HEADER,
        http: Optional[httpx.AsyncClient] = None,
        sleep: Optional[Callable[[float], Awaitable[None]]] = None,
        clock: Optional[Callable[[], float]] = None,
        random: Optional[Callable[[], float]] = None,
    ) -> None:
        """The settings of :class:`Client`; ``sleep`` is awaited (``asyncio.sleep``)."""
        super().__init__(
            max_attempts=max_attempts,
            deadline=deadline,
            attempt_timeout=attempt_timeout,
            initial_backoff=initial_backoff,
            max_backoff=max_backoff,
            key_header=key_header,
            random=random,
            clock=clock,
        )
        self._owns_http = http is None
        self._http = httpx.AsyncClient(follow_redirects=False) if http is None else http
        self._sleep: Callable[[float], Awaitable[None]] = asyncio.sleep if sleep is None else sleep

    async def aclose(self) -> None:
        """Close the httpx client, if this client created it."""
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self.aclose()

    async def request(
        self,
        method: str,
        url: Union[httpx.URL, str],
        *,
        json: Any = None,
        content: Optional[Content] = None,
        headers: Optional[HeadersLike] = None,
        key: Optional[str] = None,
    ) -> Response:
        """See :meth:`Client.request`."""
        op = self._operation(method, url, json=json, content=content, headers=headers, key=key)
        start = self._clock()
        attempts = 0
        while True:
            attempts += 1
            outcome: Union[httpx.Response, Exception]
            try:
                outcome = await self._attempt(op, self._timeout(start))
            except RETRYABLE_TRANSPORT_ERRORS as error:
                outcome = error
            step = self._next(op, attempts, start, outcome)
            if isinstance(step, Response):
                return step
            await self._sleep(step)

    async def _attempt(self, op: _Operation, timeout: float) -> httpx.Response:
        request = self._build(self._http, op, timeout)

        async def send() -> httpx.Response:
            response = await self._http.send(request, stream=True, follow_redirects=False)
            try:
                await response.aread()
            finally:
                await response.aclose()
            return response

        try:
            # The attempt's timeout covers connecting, the head and the whole body.
            return await asyncio.wait_for(send(), timeout)
        except asyncio.TimeoutError as error:
            raise httpx.ReadTimeout(
                "the attempt took longer than its timeout", request=request
            ) from error

    async def post(
        self,
        url: Union[httpx.URL, str],
        *,
        json: Any = None,
        content: Optional[Content] = None,
        headers: Optional[HeadersLike] = None,
        key: Optional[str] = None,
    ) -> Response:
        return await self.request("POST", url, json=json, content=content, headers=headers, key=key)

    async def put(
        self,
        url: Union[httpx.URL, str],
        *,
        json: Any = None,
        content: Optional[Content] = None,
        headers: Optional[HeadersLike] = None,
        key: Optional[str] = None,
    ) -> Response:
        return await self.request("PUT", url, json=json, content=content, headers=headers, key=key)

    async def patch(
        self,
        url: Union[httpx.URL, str],
        *,
        json: Any = None,
        content: Optional[Content] = None,
        headers: Optional[HeadersLike] = None,
        key: Optional[str] = None,
    ) -> Response:
        return await self.request(
            "PATCH", url, json=json, content=content, headers=headers, key=key
        )

    async def delete(
        self,
        url: Union[httpx.URL, str],
        *,
        json: Any = None,
        content: Optional[Content] = None,
        headers: Optional[HeadersLike] = None,
        key: Optional[str] = None,
    ) -> Response:
        return await self.request(
            "DELETE", url, json=json, content=content, headers=headers, key=key
        )
