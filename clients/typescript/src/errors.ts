import type { IdemResponse, Problem } from "./response.js";

/**
 * The base of every error this client throws. A message never contains the idempotency key
 * (keys can carry customer data); the errors that have one carry it as the `key` property.
 */
export class IdemError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** Why a caller-given key was refused. */
export type InvalidKeyReason = "empty" | "too_long" | "invalid_character";

/**
 * The caller-given key is not 1 to 255 characters each in 0x20–0x7E. Nothing was sent.
 * The key is not carried: it is what the caller passed.
 */
export class InvalidKey extends IdemError {
  readonly reason: InvalidKeyReason;

  constructor(reason: InvalidKeyReason) {
    const why =
      reason === "empty"
        ? "it is empty"
        : reason === "too_long"
          ? "it is longer than 255 characters"
          : "it has a character outside printable ASCII (0x20-0x7E)";
    super(`invalid idempotency key: ${why}; nothing was sent`);
    this.reason = reason;
  }
}

/** Why the client stopped retrying. */
export type GaveUpReason = "max_attempts" | "deadline";

/**
 * No definite answer within the attempts or the deadline: the operation may or may not have
 * taken effect. Sending it again under the same `key` is safe, and finds out.
 */
export class GaveUp extends IdemError {
  readonly key: string;
  readonly attempts: number;
  readonly reason: GaveUpReason;
  /** The last retryable answer, read whole; null when the last attempt got no answer. */
  readonly lastResponse: IdemResponse | null;
  /** The last transport failure (fetch rejected, timed out, body broken); null after an answer. */
  readonly lastError: unknown | null;

  constructor(
    key: string,
    attempts: number,
    reason: GaveUpReason,
    lastResponse: IdemResponse | null,
    lastError: unknown | null,
  ) {
    const last =
      lastResponse !== null
        ? `last answer: status ${lastResponse.status}`
        : `last failure: ${describe(lastError)}`;
    const why = reason === "max_attempts" ? "no attempts left" : "the deadline would be passed";
    super(`gave up after ${attempts} attempt(s), ${why} (${last})`);
    this.key = key;
    this.attempts = attempts;
    this.reason = reason;
    this.lastResponse = lastResponse;
    this.lastError = lastError;
  }
}

/**
 * The server answered `500` with the problem `urn:idem:problem:outcome-unknown`: the request
 * reached the API and its result was lost. Final: every retry gets the same answer until the
 * record expires. The operation may or may not have taken effect; reconcile it.
 */
export class OutcomeUnknown extends IdemError {
  readonly key: string;
  readonly attempts: number;
  readonly response: IdemResponse;
  readonly problem: Problem | null;

  constructor(key: string, attempts: number, response: IdemResponse, problem: Problem | null) {
    super(`the server lost the outcome of the operation (outcome unknown) after ${attempts} attempt(s)`);
    this.key = key;
    this.attempts = attempts;
    this.response = response;
    this.problem = problem;
  }
}

/**
 * The server answered `422` with the problem `urn:idem:problem:fingerprint-mismatch`: the key
 * was already used for a different request. A caller bug; not retried.
 */
export class Mismatch extends IdemError {
  readonly key: string;
  readonly attempts: number;
  readonly response: IdemResponse;
  readonly problem: Problem | null;

  constructor(key: string, attempts: number, response: IdemResponse, problem: Problem | null) {
    super(`the idempotency key was already used for a different request (after ${attempts} attempt(s))`);
    this.key = key;
    this.attempts = attempts;
    this.response = response;
    this.problem = problem;
  }
}

function describe(error: unknown): string {
  if (error instanceof Error || (typeof error === "object" && error !== null && "name" in error)) {
    const name = String((error as { name?: unknown }).name ?? "Error");
    return name;
  }
  return typeof error;
}
