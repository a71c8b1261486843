"""The client contract as pure functions: how a key is written into its header, how a
``Retry-After`` value is read, how an attempt's answer is classified, and what problem details it
carries. They hold no state and do no I/O, so that the shared case table can drive them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Literal, Mapping, Optional, Sequence, Tuple, Union

import httpx

from ._errors import InvalidKey

__all__ = [
    "HeadersLike",
    "Problem",
    "Verdict",
    "classify",
    "encode_key",
    "parse_problem",
    "parse_retry_after",
    "validate_key",
]

HeadersLike = Union[httpx.Headers, Mapping[str, str], Sequence[Tuple[str, str]]]
"""Headers in any form ``httpx.Headers`` accepts."""

OUTCOME_UNKNOWN = "urn:idem:problem:outcome-unknown"
FINGERPRINT_MISMATCH = "urn:idem:problem:fingerprint-mismatch"
PROBLEM_JSON = "application/problem+json"
REPLAYED_HEADER = "idempotent-replayed"

MAX_KEY_LENGTH = 255
# The largest number of seconds a Retry-After holds (the Rust client's u64); more is "forever".
_MAX_RETRY_AFTER = 2**64 - 1
_DIGITS = frozenset("0123456789")
_UNQUOTED_FORBIDDEN = frozenset('",;')


def validate_key(key: str) -> None:
    """Raise :class:`InvalidKey` unless ``key`` is 1 to 255 characters, each in 0x20–0x7E.

    The message never contains the key.
    """
    if not isinstance(key, str):
        raise InvalidKey(f"an idempotency key is a str, not {type(key).__name__}")
    if not key:
        raise InvalidKey("an idempotency key cannot be empty")
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidKey(
            f"an idempotency key has at most {MAX_KEY_LENGTH} characters, this one {len(key)}"
        )
    for position, char in enumerate(key):
        if not 0x20 <= ord(char) <= 0x7E:
            raise InvalidKey(
                "an idempotency key holds printable ASCII characters (0x20-0x7E) only; "
                f"the one at position {position} is not"
            )


def encode_key(key: str) -> str:
    """The header value carrying ``key``.

    The key bare when every character is in 0x21–0x7E and none is ``"``, ``,`` or ``;``;
    otherwise an RFC 8941 string: the key between double quotes, each ``"`` and ``\\`` in it
    preceded by ``\\``. Raises :class:`InvalidKey` for a key outside the key syntax.
    """
    validate_key(key)
    if all(0x21 <= ord(char) <= 0x7E and char not in _UNQUOTED_FORBIDDEN for char in key):
        return key
    return '"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'


def parse_retry_after(value: Optional[str]) -> Optional[float]:
    """The seconds a ``Retry-After`` value asks to wait, or ``None`` when it is not read.

    Spaces and tabs at both ends are ignored; what is left must be one or more ASCII digits.
    A number too large to hold (over 2**64 - 1) is :data:`math.inf`: longer than any deadline.
    HTTP-dates are not read: the backoff decides.
    """
    if value is None:
        return None
    text = value.strip(" \t")
    if not text or not all(char in _DIGITS for char in text):
        return None
    seconds = int(text)
    if seconds > _MAX_RETRY_AFTER:
        return math.inf
    return float(seconds)


@dataclass(frozen=True)
class Problem:
    """RFC 9457 problem details, as an idem server writes them."""

    type: str = "about:blank"
    title: Optional[str] = None
    status: Optional[int] = None
    detail: Optional[str] = None
    retry_after: Optional[float] = None
    """Seconds, from the response's ``Retry-After`` header (see :func:`parse_retry_after`)."""


def _json_object(body: bytes) -> Optional[Mapping[str, Any]]:
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if isinstance(value, dict):
        return value
    return None


def _media_type(headers: httpx.Headers) -> str:
    value: str = headers.get("content-type") or ""
    return value.split(";", 1)[0].strip(" \t").lower()


def _problem_of(obj: Mapping[str, Any], headers: httpx.Headers) -> Problem:
    kind = obj.get("type")
    title = obj.get("title")
    status = obj.get("status")
    detail = obj.get("detail")
    return Problem(
        type=kind if isinstance(kind, str) else "about:blank",
        title=title if isinstance(title, str) else None,
        status=status if isinstance(status, int) and not isinstance(status, bool) else None,
        detail=detail if isinstance(detail, str) else None,
        retry_after=parse_retry_after(headers.get("retry-after")),
    )


def parse_problem(headers: HeadersLike, body: bytes, *, any_content_type: bool = False) -> Optional[Problem]:
    """The problem details of an answer: its media type is ``application/problem+json``
    (parameters ignored, case-insensitive) and its body is a JSON object. Otherwise ``None``.

    With ``any_content_type``, the media type is not checked.
    """
    headers = httpx.Headers(headers)
    if not any_content_type and _media_type(headers) != PROBLEM_JSON:
        return None
    obj = _json_object(body)
    if obj is None:
        return None
    return _problem_of(obj, headers)


@dataclass(frozen=True)
class Verdict:
    """What the client does with an attempt's answer."""

    action: Literal["return", "retry", "raise"]
    retry_after: Optional[float] = None
    """For ``retry``: the seconds the server's ``Retry-After`` asks for, if it was read."""
    error: Optional[Literal["mismatch", "outcome_unknown"]] = None
    """For ``raise``: which error."""


def _json_type(body: bytes) -> Optional[Any]:
    obj = _json_object(body)
    return None if obj is None else obj.get("type")


def is_replayed(headers: HeadersLike) -> bool:
    """Whether the answer is a replay: ``Idempotent-Replayed: true`` (ASCII case-insensitive)."""
    value = httpx.Headers(headers).get(REPLAYED_HEADER)
    return value is not None and value.lower() == "true"


def classify(status: int, headers: HeadersLike, body: bytes) -> Verdict:
    """Classify an attempt's answer, in this order:

    1. ``500`` with an ``urn:idem:problem:outcome-unknown`` JSON body: raise ``OutcomeUnknown``
       (final, replayed or not);
    2. ``422`` with an ``urn:idem:problem:fingerprint-mismatch`` JSON body: raise ``Mismatch``;
    3. a replay (``Idempotent-Replayed: true``): return it, whatever its status;
    4. ``409``, ``429``, ``503``: retry, after at least the ``Retry-After``;
    5. ``408``, ``502``, ``504``: retry;
    6. anything else: return it (redirects are not followed).
    """
    headers = httpx.Headers(headers)
    if status == 500 and _json_type(body) == OUTCOME_UNKNOWN:
        return Verdict("raise", error="outcome_unknown")
    if status == 422 and _json_type(body) == FINGERPRINT_MISMATCH:
        return Verdict("raise", error="mismatch")
    if is_replayed(headers):
        return Verdict("return")
    if status in (409, 429, 503):
        return Verdict("retry", retry_after=parse_retry_after(headers.get("retry-after")))
    if status in (408, 502, 504):
        return Verdict("retry")
    return Verdict("return")
