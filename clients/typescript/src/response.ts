/** An RFC 9457 problem detail, as idem servers send them. */
export interface Problem {
  /** The problem type; "about:blank" when the body has none. */
  type: string;
  title: string | null;
  status: number | null;
  detail: string | null;
  /** The response's Retry-After in milliseconds (digits only; Infinity when too large); null when absent or not read. */
  retryAfterMs: number | null;
}

/** The definite answer to an operation: its status, headers and whole body. */
export class IdemResponse {
  readonly status: number;
  readonly statusText: string;
  readonly headers: Headers;
  readonly body: Uint8Array;
  /** The idempotency key the operation was sent under. */
  readonly key: string;
  /** How many attempts were made, this one included. */
  readonly attempts: number;
  /** Whether the server replayed a stored answer (`Idempotent-Replayed: true`). */
  readonly replayed: boolean;
  /** The problem detail when the answer is `application/problem+json`; otherwise null. */
  readonly problem: Problem | null;

  constructor(init: {
    status: number;
    statusText?: string;
    headers: Headers;
    body: Uint8Array;
    key: string;
    attempts: number;
    replayed: boolean;
    problem: Problem | null;
  }) {
    this.status = init.status;
    this.statusText = init.statusText ?? "";
    this.headers = init.headers;
    this.body = init.body;
    this.key = init.key;
    this.attempts = init.attempts;
    this.replayed = init.replayed;
    this.problem = init.problem;
  }

  /** Whether the status is 2xx. */
  get ok(): boolean {
    return this.status >= 200 && this.status < 300;
  }

  /** The body decoded as UTF-8. */
  text(): string {
    return new TextDecoder().decode(this.body);
  }

  /** The body parsed as JSON; throws a SyntaxError when it is not JSON. */
  json<T = unknown>(): T {
    return JSON.parse(this.text()) as T;
  }
}
