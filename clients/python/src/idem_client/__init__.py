"""idem-client: an httpx client that sends each logical operation under one idempotency key,
and retries it safely until it gets a definite answer.

The contract it follows is shared with idem's Rust and TypeScript clients; see docs/client.md
in the idem repository.
"""

from ._client import DEFAULT_KEY_HEADER, RETRYABLE_TRANSPORT_ERRORS, AsyncClient, Client
from ._contract import (
    Problem,
    Verdict,
    classify,
    encode_key,
    is_replayed,
    parse_problem,
    parse_retry_after,
    validate_key,
)
from ._errors import GaveUp, IdemError, InvalidKey, Mismatch, OutcomeUnknown
from ._response import Response

__version__ = "0.1.0"

__all__ = [
    "AsyncClient",
    "Client",
    "DEFAULT_KEY_HEADER",
    "GaveUp",
    "IdemError",
    "InvalidKey",
    "Mismatch",
    "OutcomeUnknown",
    "Problem",
    "RETRYABLE_TRANSPORT_ERRORS",
    "Response",
    "Verdict",
    "__version__",
    "classify",
    "encode_key",
    "is_replayed",
    "parse_problem",
    "parse_retry_after",
    "validate_key",
]
