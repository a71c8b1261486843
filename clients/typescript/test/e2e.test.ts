// The client on Node's real fetch against a small idempotent server on 127.0.0.1, and the
// end-to-end driver (build/e2e/payments.js) run as a process against it.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { createServer } from "node:http";
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";

import { GaveUp, IdemClient } from "../src/index.js";

interface Stored {
  status: number;
  body: string;
}

/**
 * A payments API behind an idempotency layer, with faults by payment number: n % 4 == 1 runs
 * the payment and then drops the connection (the answer is lost, the replay finds it);
 * n % 4 == 2 answers 503 once; n % 4 == 3 answers 502 once; others answer at once.
 */
function paymentsServer(): { server: Server; executed: Map<string, number>; keys: string[] } {
  const stored = new Map<string, Stored>();
  const faulted = new Set<string>();
  const executed = new Map<string, number>();
  const keys: string[] = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const key = req.headers["idempotency-key"];
      if (typeof key === "string") keys.push(key);
      if (req.url === "/moved") {
        res.writeHead(303, { location: "/elsewhere" }).end();
        return;
      }
      if (req.method !== "POST" || req.url !== "/payments" || typeof key !== "string") {
        res.writeHead(400).end();
        return;
      }
      const replay = stored.get(key);
      if (replay !== undefined) {
        res.writeHead(replay.status, { "content-type": "application/json", "idempotent-replayed": "true" });
        res.end(replay.body);
        return;
      }
      const request = JSON.parse(Buffer.concat(chunks).toString("utf8")) as { payment: string; amount: number };
      const n = request.amount - 1;
      if (!faulted.has(key) && n % 4 === 2) {
        faulted.add(key);
        res.writeHead(503, { "retry-after": "0" }).end();
        return;
      }
      if (!faulted.has(key) && n % 4 === 3) {
        faulted.add(key);
        res.writeHead(502).end();
        return;
      }
      executed.set(request.payment, (executed.get(request.payment) ?? 0) + 1);
      const answer = { status: 201, body: JSON.stringify({ payment: request.payment, amount: request.amount }) };
      stored.set(key, answer);
      if (!faulted.has(key) && n % 4 === 1) {
        faulted.add(key);
        req.socket.destroy();
        return;
      }
      res.writeHead(answer.status, { "content-type": "application/json" }).end(answer.body);
    });
  });
  return { server, executed, keys };
}

describe("on the real fetch", () => {
  const { server, executed, keys } = paymentsServer();
  let base = "";

  before(async () => {
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  after(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });

  it("retries a lost answer and gets the replay", async () => {
    const client = new IdemClient({ initialBackoffMs: 1, maxBackoffMs: 1 });
    const response = await client.post(`${base}/payments`, {
      key: "order 41",
      json: { payment: "real-1", amount: 2 },
    });
    assert.equal(response.status, 201);
    assert.equal(response.attempts, 2);
    assert.equal(response.replayed, true);
    assert.deepEqual(response.json(), { payment: "real-1", amount: 2 });
    assert.equal(executed.get("real-1"), 1);
    assert.deepEqual(keys.slice(-2), ['"order 41"', '"order 41"']);
  });

  it("does not follow a redirect", async () => {
    const response = await new IdemClient().post(`${base}/moved`, { json: {} });
    assert.equal(response.status, 303);
    assert.equal(response.headers.get("location"), "/elsewhere");
    assert.equal(response.attempts, 1);
  });

  it("retries a refused connection, then gives up", async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    const client = new IdemClient({ maxAttempts: 3, initialBackoffMs: 1, maxBackoffMs: 1 });
    const error = await client.post(`http://127.0.0.1:${port}/payments`, { json: {} }).then(
      () => assert.fail("expected GaveUp"),
      (e: unknown) => e,
    );
    assert.ok(error instanceof GaveUp);
    assert.equal(error.reason, "max_attempts");
    assert.equal(error.attempts, 3);
    assert.ok(error.lastError instanceof TypeError);
  });

  it("the payments driver prints one line per payment, each paid once", async () => {
    const driver = fileURLToPath(new URL("../e2e/payments.js", import.meta.url));
    const stdout = await new Promise<string>((resolve, reject) => {
      execFile(
        process.execPath,
        [driver],
        {
          env: {
            ...process.env,
            IDEM_E2E_URL: `${base}/`,
            IDEM_E2E_PAYMENTS: "12",
            IDEM_E2E_PREFIX: "e2e",
            IDEM_E2E_CONCURRENCY: "3",
          },
          timeout: 60_000,
        },
        (error, out) => (error ? reject(error) : resolve(out)),
      );
    });
    const lines = stdout
      .trim()
      .split("\n")
      .map((line) => JSON.parse(line) as Record<string, unknown>)
      .sort((a, b) => Number(String(a["payment"]).slice(4)) - Number(String(b["payment"]).slice(4)));
    assert.equal(lines.length, 12);
    lines.forEach((line, i) => {
      const payment = `e2e-${i}`;
      assert.deepEqual(line, {
        payment,
        status: 201,
        attempts: i % 4 === 0 ? 1 : 2,
        replayed: i % 4 === 1,
        answer: payment,
      });
      assert.equal(executed.get(payment), 1);
    });
  });
});
