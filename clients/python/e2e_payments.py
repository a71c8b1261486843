"""End-to-end driver: sends IDEM_E2E_PAYMENTS payments to IDEM_E2E_URL/payments through the
Python client, IDEM_E2E_CONCURRENCY (8) at a time, and prints one JSON line per payment:

    {"payment": ..., "status": 201, "attempts": 1, "replayed": false, "answer": ...}
    {"payment": ..., "error": "GaveUp", "attempts": 30}

It exits 0 once every payment has ended; judging the lines is the harness's job.
Run it with the Python of a virtual environment where idem-client is installed.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, Optional

try:
    import idem_client
except ImportError:  # not installed: the package next to this file
    sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))
    import idem_client


def _answer(response: idem_client.Response) -> Any:
    try:
        body = response.json()
    except ValueError:
        return None
    return body.get("payment") if isinstance(body, dict) else None


async def _pay(
    client: idem_client.AsyncClient,
    url: str,
    payment: str,
    amount: int,
    limit: asyncio.Semaphore,
) -> None:
    line: Dict[str, Any]
    async with limit:
        try:
            response = await client.post(url, json={"payment": payment, "amount": amount})
        except Exception as error:  # every failure is a line for the harness to judge
            attempts: Optional[int] = getattr(error, "attempts", None)
            line = {"payment": payment, "error": type(error).__name__, "attempts": attempts}
        else:
            line = {
                "payment": payment,
                "status": response.status_code,
                "attempts": response.attempts,
                "replayed": response.replayed,
                "answer": _answer(response),
            }
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


async def main() -> int:
    base = os.environ["IDEM_E2E_URL"].rstrip("/")
    count = int(os.environ["IDEM_E2E_PAYMENTS"])
    prefix = os.environ["IDEM_E2E_PREFIX"]
    concurrency = max(1, int(os.environ.get("IDEM_E2E_CONCURRENCY") or "8"))
    limit = asyncio.Semaphore(concurrency)
    async with idem_client.AsyncClient(
        attempt_timeout=1.0,
        deadline=60.0,
        max_attempts=30,
        initial_backoff=0.05,
        max_backoff=1.0,
    ) as client:
        await asyncio.gather(
            *(
                _pay(client, f"{base}/payments", f"{prefix}-{i}", i + 1, limit)
                for i in range(count)
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
