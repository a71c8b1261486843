"""The clients' shared case table (clients/cases.json in the idem repository) through this
client: the pure functions, and the real loop."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import httpx
import pytest

from idem_client import (
    GaveUp,
    InvalidKey,
    Mismatch,
    OutcomeUnknown,
    Problem,
    classify,
    encode_key,
    parse_problem,
    parse_retry_after,
)
from support import KINDS, FakeTime, Server, answer, run

CASES_PATH = Path(__file__).resolve().parents[2] / "cases.json"
CASES: Dict[str, Any] = json.loads(CASES_PATH.read_text(encoding="utf-8"))

ANSWERS: List[Dict[str, Any]] = CASES["answers"]
TRANSPORT: List[Dict[str, Any]] = CASES["transport"]
RETRY_AFTER: List[Dict[str, Any]] = CASES["retry_after"]
KEYS: List[Dict[str, Any]] = CASES["keys"]


def by_name(cases: List[Dict[str, Any]]) -> pytest.MarkDecorator:
    return pytest.mark.parametrize("case", cases, ids=[case["name"] for case in cases])


def test_the_table_is_read() -> None:
    assert "retry contract" in CASES["about"]
    assert len(ANSWERS) >= 30
    assert len(TRANSPORT) == 3
    assert len(RETRY_AFTER) >= 14
    assert len(KEYS) >= 15


def expected_problem(case: Dict[str, Any]) -> Optional[Problem]:
    problem = case["expect"]["problem"]
    if problem is None:
        return None
    seconds = case["expect"].get("retry_after") if "retry-after" in case["headers"] else None
    return Problem(
        type=problem["type"],
        title=problem["title"],
        status=problem["status"],
        detail=problem["detail"],
        retry_after=seconds,
    )


@by_name(ANSWERS)
def test_answer_is_classified(case: Dict[str, Any]) -> None:
    expect = case["expect"]
    body = case["body"].encode("utf-8")
    verdict = classify(case["status"], case["headers"], body)
    assert verdict.action == expect["action"]
    assert verdict.retry_after == expect.get("retry_after")
    assert verdict.error == expect.get("error")
    if "problem" in expect:
        # The errors parse their problem whatever the content type; answers only as problems.
        raised = expect["action"] == "raise"
        assert parse_problem(case["headers"], body, any_content_type=raised) == expected_problem(
            case
        )


@by_name(ANSWERS)
@pytest.mark.parametrize("kind", KINDS)
def test_answer_through_the_loop(kind: str, case: Dict[str, Any]) -> None:
    expect = case["expect"]
    first = answer(case["status"], case["headers"], case["body"].encode("utf-8"))
    server = Server(first, answer(200, {}, b'{"id":"ch_1"}'))
    time = FakeTime()
    if expect["action"] == "return":
        response = run(kind, server, time=time)
        assert response.status_code == case["status"]
        assert response.content == case["body"].encode("utf-8")
        assert response.attempts == 1
        assert response.replayed == (case["headers"].get("idempotent-replayed") == "true")
        if "problem" in expect:
            assert response.problem == expected_problem(case)
        assert time.sleeps == []
    elif expect["action"] == "retry":
        response = run(kind, server, time=time)
        assert response.status_code == 200
        assert response.attempts == 2
        assert len(time.sleeps) == 1
        assert time.sleeps[0] >= (expect["retry_after"] or 0)
        assert server.keys[0] == server.keys[1] == response.key
    else:
        error_type = {"mismatch": Mismatch, "outcome_unknown": OutcomeUnknown}[expect["error"]]
        with pytest.raises(error_type) as caught:
            run(kind, server, time=time)
        error = caught.value
        assert isinstance(error, (Mismatch, OutcomeUnknown))
        assert error.attempts == 1
        assert error.response.status_code == case["status"]
        assert error.problem == expected_problem(case)
        assert error.key == server.keys[0]
        assert len(server.requests) == 1
        assert time.sleeps == []


def connect_failure(request: httpx.Request) -> Exception:
    return httpx.ConnectError("connection refused", request=request)


def timeout_failure(request: httpx.Request) -> Exception:
    return httpx.ReadTimeout("timed out", request=request)


def broken_failure(request: httpx.Request) -> Exception:
    return httpx.RemoteProtocolError(
        "peer closed connection without sending complete message body", request=request
    )


FAILURES: Dict[str, Callable[[httpx.Request], Exception]] = {
    "connect": connect_failure,
    "timeout": timeout_failure,
    "broken": broken_failure,
}


@by_name(TRANSPORT)
@pytest.mark.parametrize("kind", KINDS)
def test_transport_failure_is_retried(kind: str, case: Dict[str, Any]) -> None:
    assert case["expect"]["action"] == "retry"
    failure = FAILURES[case["failure"]]
    calls: List[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) == 1:
            raise failure(request)
        return httpx.Response(201, content=b"done")

    time = FakeTime()
    response = run(kind, handler, time=time, call={"json": {"amount": 5}})
    assert response.status_code == 201
    assert response.content == b"done"
    assert response.attempts == 2
    assert len(calls) == 2
    assert calls[0].headers["idempotency-key"] == calls[1].headers["idempotency-key"]
    assert calls[0].content == calls[1].content == b'{"amount":5}'
    assert len(time.sleeps) == 1


@by_name(TRANSPORT)
@pytest.mark.parametrize("kind", KINDS)
def test_transport_failure_every_time_gives_up_with_it(kind: str, case: Dict[str, Any]) -> None:
    failure = FAILURES[case["failure"]]

    def handler(request: httpx.Request) -> httpx.Response:
        raise failure(request)

    with pytest.raises(GaveUp) as caught:
        run(kind, handler, max_attempts=3)
    assert caught.value.reason == "max_attempts"
    assert caught.value.attempts == 3
    assert caught.value.last_response is None
    assert type(caught.value.last_exception) is type(failure(httpx.Request("GET", "http://x")))


@pytest.mark.parametrize("case", RETRY_AFTER, ids=[repr(case["value"]) for case in RETRY_AFTER])
def test_retry_after_is_read(case: Dict[str, Any]) -> None:
    expected = math.inf if case["seconds"] == "forever" else case["seconds"]
    assert parse_retry_after(case["value"]) == expected


@pytest.mark.parametrize(
    "case", KEYS, ids=[f"{i}:{case['key'][:24]!r}" for i, case in enumerate(KEYS)]
)
def test_key_is_encoded(case: Dict[str, Any]) -> None:
    if case["header"] is None:
        with pytest.raises(InvalidKey) as caught:
            encode_key(case["key"])
        if case["key"].strip():
            assert case["key"] not in str(caught.value)
    else:
        assert encode_key(case["key"]) == case["header"]


@pytest.mark.parametrize(
    "case", KEYS, ids=[f"{i}:{case['key'][:24]!r}" for i, case in enumerate(KEYS)]
)
@pytest.mark.parametrize("kind", KINDS)
def test_key_is_sent_or_refused(kind: str, case: Dict[str, Any]) -> None:
    server = Server(answer(200))
    if case["header"] is None:
        with pytest.raises(InvalidKey):
            run(kind, server, call={"key": case["key"]})
        assert server.requests == []
    else:
        response = run(kind, server, call={"key": case["key"]})
        assert server.keys == [case["header"]]
        assert response.key == case["key"]
