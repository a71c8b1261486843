"""Helpers of the tests: a fake clock and sleep, and one way to run an operation through either
client over an ``httpx.MockTransport``."""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Dict, List, Optional

import httpx

from idem_client import AsyncClient, Client, Response

URL = "http://idem.test/charges"
KINDS = ["sync", "async"]

Handler = Callable[[httpx.Request], httpx.Response]


class FakeTime:
    """A clock that only moves when told, or when slept on; sleeps are recorded."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: List[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    async def asleep(self, seconds: float) -> None:
        self.sleep(seconds)


class Server:
    """A scripted server: answers (or raises) from a list, in order, the last one repeated; the
    requests it got are kept."""

    def __init__(self, *answers: Any, time: Optional[FakeTime] = None, took: float = 0.0) -> None:
        self.answers = list(answers)
        self.requests: List[httpx.Request] = []
        self.timeouts: List[Dict[str, Optional[float]]] = []
        self.time = time
        self.took = took

    def __call__(self, request: httpx.Request) -> httpx.Response:
        request.read()
        self.requests.append(request)
        self.timeouts.append(dict(request.extensions.get("timeout", {})))
        if self.time is not None:
            self.time.now += self.took
        answer = self.answers[min(len(self.requests), len(self.answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        assert isinstance(answer, httpx.Response)
        return answer

    @property
    def keys(self) -> List[Optional[str]]:
        return [request.headers.get("idempotency-key") for request in self.requests]

    @property
    def bodies(self) -> List[bytes]:
        return [request.content for request in self.requests]


def answer(
    status: int, headers: Optional[dict[str, str]] = None, body: bytes = b""
) -> httpx.Response:
    return httpx.Response(status, headers=headers, content=body)


def run(
    kind: str,
    handler: Handler,
    *,
    time: Optional[FakeTime] = None,
    method: str = "POST",
    url: str = URL,
    random: Callable[[], float] = lambda: 0.5,
    follow_redirects: bool = False,
    call: Optional[dict[str, Any]] = None,
    **settings: Any,
) -> Response:
    """One operation through a ``kind`` client whose httpx client has ``handler`` as transport."""
    fake = FakeTime() if time is None else time
    call = {} if call is None else call
    if kind == "sync":
        http = httpx.Client(transport=httpx.MockTransport(handler), follow_redirects=follow_redirects)
        with Client(http=http, sleep=fake.sleep, clock=fake.clock, random=random, **settings) as client:
            return client.request(method, url, **call)

    async def go() -> Response:
        http = httpx.AsyncClient(
            transport=httpx.MockTransport(handler), follow_redirects=follow_redirects
        )
        async with AsyncClient(
            http=http, sleep=fake.asleep, clock=fake.clock, random=random, **settings
        ) as client:
            return await client.request(method, url, **call)

    return asyncio.run(go())
