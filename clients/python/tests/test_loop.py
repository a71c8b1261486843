"""The retry loop of both clients, over ``httpx.MockTransport`` with a fake clock and sleep."""

from __future__ import annotations

import asyncio
import math
import uuid
from typing import AsyncIterator, Iterator, List

import httpx
import pytest

from idem_client import (
    AsyncClient,
    Client,
    GaveUp,
    IdemError,
    InvalidKey,
    Mismatch,
    OutcomeUnknown,
    Problem,
)
from support import KINDS, URL, FakeTime, Server, answer, run

PROBLEM = {"content-type": "application/problem+json"}
SECRET = "secret-customer-4242"

pytestmark = pytest.mark.parametrize("kind", KINDS)


def test_every_attempt_carries_the_same_key_and_body(kind: str) -> None:
    server = Server(answer(503), answer(502), answer(201, body=b'{"id":"ch_1"}'))
    response = run(kind, server, call={"json": {"amount": 1000, "currency": "eur", "note": "é"}})
    assert response.status_code == 201
    assert response.json() == {"id": "ch_1"}
    assert response.attempts == 3
    assert len(server.requests) == 3
    key = server.keys[0]
    assert key is not None
    assert server.keys == [key, key, key]
    assert uuid.UUID(key).version == 4
    assert str(uuid.UUID(key)) == key
    assert response.key == key
    body = '{"amount":1000,"currency":"eur","note":"é"}'.encode("utf-8")
    assert server.bodies == [body, body, body]
    assert [r.headers["content-type"] for r in server.requests] == ["application/json"] * 3
    assert [r.method for r in server.requests] == ["POST"] * 3


def test_content_is_sent_as_given_on_every_attempt(kind: str) -> None:
    server = Server(answer(504), answer(200))
    headers = {"content-type": "text/plain"}
    response = run(kind, server, method="PUT", call={"content": "héllo", "headers": headers})
    assert response.attempts == 2
    assert server.bodies == ["héllo".encode("utf-8")] * 2
    assert [r.method for r in server.requests] == ["PUT", "PUT"]
    assert [r.headers["content-type"] for r in server.requests] == ["text/plain"] * 2


def test_json_and_content_together_are_refused(kind: str) -> None:
    server = Server(answer(200))
    with pytest.raises(TypeError):
        run(kind, server, call={"json": {"a": 1}, "content": b"x"})
    assert server.requests == []


def test_each_operation_has_a_new_key(kind: str) -> None:
    server = Server(answer(200))
    first = run(kind, server)
    second = run(kind, server)
    assert first.key != second.key
    assert server.keys == [first.key, second.key]


def test_a_given_key_is_sent_bare(kind: str) -> None:
    server = Server(answer(429), answer(200))
    response = run(kind, server, call={"key": "order-42"})
    assert server.keys == ["order-42", "order-42"]
    assert response.key == "order-42"
    assert response.attempts == 2


def test_a_given_key_is_sent_quoted(kind: str) -> None:
    server = Server(answer(200))
    response = run(kind, server, call={"key": 'say "hi" \\o/'})
    assert server.keys == ['"say \\"hi\\" \\\\o/"']
    assert response.key == 'say "hi" \\o/'


def test_an_invalid_key_sends_nothing(kind: str) -> None:
    server = Server(answer(200))
    with pytest.raises(InvalidKey) as caught:
        run(kind, server, call={"key": SECRET + "\n"})
    assert server.requests == []
    assert SECRET not in str(caught.value)
    assert isinstance(caught.value, IdemError)


def test_attempts_are_counted(kind: str) -> None:
    time = FakeTime()
    server = Server(answer(502), answer(504), answer(408), answer(200))
    response = run(kind, server, time=time)
    assert response.attempts == 4
    assert len(server.requests) == 4
    assert len(time.sleeps) == 3


def test_gives_up_after_max_attempts_with_the_last_response(kind: str) -> None:
    time = FakeTime()
    server = Server(answer(503, body=b"first"), answer(503, body=b"again"), answer(503, body=b"last"))
    with pytest.raises(GaveUp) as caught:
        run(kind, server, time=time, max_attempts=3)
    error = caught.value
    assert error.reason == "max_attempts"
    assert error.attempts == 3
    assert error.last_exception is None
    assert error.last_response is not None
    assert error.last_response.status_code == 503
    assert error.last_response.content == b"last"
    assert error.last_response.attempts == 3
    assert error.key == server.keys[0]
    assert len(server.requests) == 3
    assert len(time.sleeps) == 2


def test_max_attempts_zero_counts_as_one(kind: str) -> None:
    server = Server(answer(503))
    with pytest.raises(GaveUp) as caught:
        run(kind, server, max_attempts=0)
    assert caught.value.attempts == 1
    assert caught.value.reason == "max_attempts"
    assert len(server.requests) == 1


def test_gives_up_at_the_deadline_without_the_wait(kind: str) -> None:
    # Each attempt takes 4 s; Retry-After asks for 3 s; the deadline is 10 s.
    time = FakeTime()
    server = Server(answer(429, {"retry-after": "3"}), time=time, took=4.0)
    with pytest.raises(GaveUp) as caught:
        run(kind, server, time=time, deadline=10.0, attempt_timeout=5.0, random=lambda: 0.0)
    error = caught.value
    assert error.reason == "deadline"
    assert error.attempts == 2
    assert error.last_response is not None
    assert error.last_response.status_code == 429
    # Attempt 1 ends at 4 s, waits 3 s; attempt 2 ends at 11 s: no wait past the deadline.
    assert time.sleeps == [3.0]
    assert time.now == 1011.0
    # Each attempt's timeout is the smaller of attempt_timeout and what is left.
    assert server.timeouts == [
        {"connect": 5.0, "read": 5.0, "write": 5.0, "pool": 5.0},
        {"connect": 3.0, "read": 3.0, "write": 3.0, "pool": 3.0},
    ]


def test_a_retry_after_past_the_deadline_gives_up_at_once(kind: str) -> None:
    time = FakeTime()
    server = Server(answer(503, {"retry-after": "99999999999999999999999"}))
    with pytest.raises(GaveUp) as caught:
        run(kind, server, time=time)
    assert caught.value.reason == "deadline"
    assert caught.value.attempts == 1
    assert time.sleeps == []


def test_a_wait_ending_exactly_at_the_deadline_is_not_waited(kind: str) -> None:
    time = FakeTime()
    server = Server(answer(409, {"retry-after": "30"}))
    with pytest.raises(GaveUp) as caught:
        run(kind, server, time=time, deadline=30.0)
    assert caught.value.reason == "deadline"
    assert time.sleeps == []


def test_retry_after_is_the_least_wait(kind: str) -> None:
    time = FakeTime()
    server = Server(answer(503, {"retry-after": "2"}), answer(409, {"retry-after": " 1 "}), answer(200))
    response = run(kind, server, time=time, random=lambda: 0.5)
    assert response.attempts == 3
    # The backoffs (0.05 s, 0.1 s) are shorter than the Retry-After values.
    assert time.sleeps == [2.0, 1.0]


def test_a_backoff_longer_than_retry_after_wins(kind: str) -> None:
    time = FakeTime()
    server = Server(answer(429, {"retry-after": "0"}), answer(200))
    run(kind, server, time=time, random=lambda: 1.0, initial_backoff=1.5)
    assert time.sleeps == [1.5]


def test_retry_after_is_not_read_on_502(kind: str) -> None:
    time = FakeTime()
    server = Server(answer(502, {"retry-after": "3"}), answer(200))
    run(kind, server, time=time, random=lambda: 1.0)
    assert time.sleeps == [0.1]


@pytest.mark.parametrize(
    "fraction, sleeps",
    [
        (1.0, [0.1, 0.2, 0.4, 0.5, 0.5]),
        (0.5, [0.05, 0.1, 0.2, 0.25, 0.25]),
        (0.0, [0.0, 0.0, 0.0, 0.0, 0.0]),
    ],
)
def test_backoff_is_full_jitter_within_its_bounds(
    kind: str, fraction: float, sleeps: List[float]
) -> None:
    time = FakeTime()
    server = Server(answer(502))
    with pytest.raises(GaveUp):
        run(
            kind,
            server,
            time=time,
            random=lambda: fraction,
            max_attempts=6,
            initial_backoff=0.1,
            max_backoff=0.5,
        )
    assert time.sleeps == sleeps


def test_a_replay_is_returned(kind: str) -> None:
    server = Server(answer(201, {"idempotent-replayed": "TRUE"}, b'{"id":"ch_1"}'))
    response = run(kind, server)
    assert response.replayed is True
    assert response.attempts == 1
    assert response.status_code == 201


def test_a_fresh_answer_is_not_a_replay(kind: str) -> None:
    response = run(kind, Server(answer(201)))
    assert response.replayed is False


def test_a_replayed_503_ends_the_retries(kind: str) -> None:
    time = FakeTime()
    server = Server(answer(503), answer(503, {"idempotent-replayed": "true", "retry-after": "1"}))
    response = run(kind, server, time=time)
    assert response.status_code == 503
    assert response.replayed is True
    assert response.attempts == 2
    assert len(time.sleeps) == 1


def test_a_mismatch_is_raised_at_once_with_its_problem(kind: str) -> None:
    time = FakeTime()
    body = (
        b'{"type":"urn:idem:problem:fingerprint-mismatch","title":"Idempotency key reused",'
        b'"status":422,"detail":"the key was used for a different request"}'
    )
    server = Server(answer(422, PROBLEM, body))
    with pytest.raises(Mismatch) as caught:
        run(kind, server, time=time, call={"key": SECRET})
    error = caught.value
    assert error.attempts == 1
    assert error.key == SECRET
    assert error.response.status_code == 422
    assert error.response.key == SECRET
    assert error.problem == Problem(
        type="urn:idem:problem:fingerprint-mismatch",
        title="Idempotency key reused",
        status=422,
        detail="the key was used for a different request",
        retry_after=None,
    )
    assert len(server.requests) == 1
    assert time.sleeps == []


def test_outcome_unknown_is_raised_at_once_with_its_problem(kind: str) -> None:
    time = FakeTime()
    # No content type: the error's problem is read from the body all the same.
    body = b'{"type":"urn:idem:problem:outcome-unknown","title":"Outcome unknown","status":500}'
    server = Server(answer(500, {"idempotent-replayed": "true"}, body))
    with pytest.raises(OutcomeUnknown) as caught:
        run(kind, server, time=time, call={"key": SECRET})
    error = caught.value
    assert error.attempts == 1
    assert error.key == SECRET
    assert error.response.status_code == 500
    assert error.response.replayed is True
    assert error.response.problem is None
    assert error.problem == Problem(
        type="urn:idem:problem:outcome-unknown", title="Outcome unknown", status=500
    )
    assert len(server.requests) == 1
    assert time.sleeps == []


def test_outcome_unknown_after_retries_counts_them(kind: str) -> None:
    body = b'{"type":"urn:idem:problem:outcome-unknown"}'
    server = Server(answer(502), answer(500, PROBLEM, body))
    with pytest.raises(OutcomeUnknown) as caught:
        run(kind, server)
    assert caught.value.attempts == 2
    assert caught.value.problem == Problem(type="urn:idem:problem:outcome-unknown")


@pytest.mark.parametrize("follow_redirects", [False, True])
def test_redirects_are_not_followed(kind: str, follow_redirects: bool) -> None:
    server = Server(answer(303, {"location": "/charges/ch_1"}), answer(200))
    response = run(kind, server, follow_redirects=follow_redirects)
    assert response.status_code == 303
    assert response.headers["location"] == "/charges/ch_1"
    assert response.attempts == 1
    assert len(server.requests) == 1


def test_the_callers_key_header_is_replaced(kind: str) -> None:
    server = Server(answer(200))
    headers = [("IDEMPOTENCY-KEY", "mine"), ("idempotency-key", "again"), ("x-trace", "t1")]
    response = run(kind, server, call={"headers": headers, "key": "order-7"})
    request = server.requests[0]
    assert request.headers.get_list("idempotency-key") == ["order-7"]
    assert request.headers["x-trace"] == "t1"
    assert response.key == "order-7"


def test_the_key_header_can_be_renamed(kind: str) -> None:
    server = Server(answer(200))
    run(kind, server, key_header="X-Request-Key", call={"key": "order-8", "headers": {"x-request-key": "no"}})
    request = server.requests[0]
    assert request.headers.get_list("x-request-key") == ["order-8"]
    assert "idempotency-key" not in request.headers


def test_problem_details_of_an_answer(kind: str) -> None:
    headers = {"content-type": "Application/Problem+JSON; charset=utf-8", "retry-after": "5"}
    body = b'{"type":"urn:idem:problem:invalid-key","title":"Invalid idempotency key","status":400}'
    response = run(kind, Server(answer(400, headers, body)))
    assert response.problem == Problem(
        type="urn:idem:problem:invalid-key",
        title="Invalid idempotency key",
        status=400,
        detail=None,
        retry_after=5.0,
    )
    assert run(kind, Server(answer(400, PROBLEM, b"{}"))).problem == Problem(type="about:blank")
    assert run(kind, Server(answer(400, PROBLEM, b"[1]"))).problem is None
    assert run(kind, Server(answer(400, {}, body))).problem is None


def test_no_error_shows_the_key(kind: str) -> None:
    errors: List[Exception] = []
    cases = [
        Server(answer(503)),
        Server(httpx.ConnectError("refused")),
        Server(answer(422, PROBLEM, b'{"type":"urn:idem:problem:fingerprint-mismatch"}')),
        Server(answer(500, PROBLEM, b'{"type":"urn:idem:problem:outcome-unknown"}')),
    ]
    for server in cases:
        with pytest.raises(IdemError) as caught:
            run(kind, server, max_attempts=2, call={"key": SECRET})
        errors.append(caught.value)
    assert [type(e) for e in errors] == [GaveUp, GaveUp, Mismatch, OutcomeUnknown]
    for error in errors:
        assert SECRET not in str(error)
        assert SECRET not in repr(error)
        assert getattr(error, "key") == SECRET
    assert "503" in str(errors[0])
    assert "ConnectError" in str(errors[1])


def test_a_refused_connection_is_retried_for_real(kind: str) -> None:
    # Nothing listens on port 1 of the loopback interface: every attempt is refused.
    time = FakeTime()
    if kind == "sync":
        with Client(sleep=time.sleep, clock=time.clock, max_attempts=2) as client:
            with pytest.raises(GaveUp) as caught:
                client.post("http://127.0.0.1:1/charges", json={"amount": 1})
    else:

        async def go() -> None:
            async with AsyncClient(sleep=time.asleep, clock=time.clock, max_attempts=2) as client:
                await client.post("http://127.0.0.1:1/charges", json={"amount": 1})

        with pytest.raises(GaveUp) as caught:
            asyncio.run(go())
    assert caught.value.reason == "max_attempts"
    assert caught.value.attempts == 2
    assert isinstance(caught.value.last_exception, httpx.ConnectError)
    assert len(time.sleeps) == 1


def test_every_method(kind: str) -> None:
    server = Server(answer(200))
    if kind == "sync":
        with Client(http=httpx.Client(transport=httpx.MockTransport(server))) as client:
            for call in (client.post, client.put, client.patch, client.delete):
                assert call(URL, key="k").attempts == 1
    else:

        async def go() -> None:
            http = httpx.AsyncClient(transport=httpx.MockTransport(server))
            async with AsyncClient(http=http) as client:
                for call in (client.post, client.put, client.patch, client.delete):
                    assert (await call(URL, key="k")).attempts == 1

        asyncio.run(go())
    assert [r.method for r in server.requests] == ["POST", "PUT", "PATCH", "DELETE"]
    assert server.keys == ["k"] * 4


def test_the_client_closes_only_the_http_client_it_created(kind: str) -> None:
    if kind == "sync":
        with Client() as own:
            pass
        assert own._http.is_closed
        given = httpx.Client()
        with Client(http=given):
            pass
        assert not given.is_closed
        given.close()
    else:

        async def go() -> None:
            async with AsyncClient() as own:
                pass
            assert own._http.is_closed
            given = httpx.AsyncClient()
            async with AsyncClient(http=given):
                pass
            assert not given.is_closed
            await given.aclose()

        asyncio.run(go())


def test_an_attempt_has_the_whole_body_within_its_timeout(kind: str) -> None:
    """An answer whose body comes too slowly times the attempt out; the next one is sent."""
    time = FakeTime()
    slow = 0

    class SlowBody(httpx.SyncByteStream, httpx.AsyncByteStream):
        def __iter__(self) -> Iterator[bytes]:
            for chunk in (b"a", b"b", b"c"):
                time.now += 6.0  # each chunk takes 6 s on the fake clock
                yield chunk

        async def __aiter__(self) -> AsyncIterator[bytes]:
            await asyncio.sleep(10)  # the async client's timeout runs on the event loop
            yield b"late"

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal slow
        slow += 1
        if slow == 1:
            return httpx.Response(200, stream=SlowBody())
        return httpx.Response(200, content=b"quick")

    timeout = 10.0 if kind == "sync" else 0.05
    response = run(kind, handler, time=time, attempt_timeout=timeout)
    assert response.content == b"quick"
    assert response.attempts == 2
    assert slow == 2


def test_settings_are_checked(kind: str) -> None:
    for bad in ({"deadline": -1.0}, {"attempt_timeout": math.nan}, {"key_header": ""}):
        with pytest.raises(ValueError):
            if kind == "sync":
                Client(**bad)
            else:
                AsyncClient(**bad)
