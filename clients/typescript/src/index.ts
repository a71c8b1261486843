export { IdemClient } from "./client.js";
export type { FetchLike, IdemClientOptions, IdemRequestInit } from "./client.js";
export { IdemResponse } from "./response.js";
export type { Problem } from "./response.js";
export { GaveUp, IdemError, InvalidKey, Mismatch, OutcomeUnknown } from "./errors.js";
export type { GaveUpReason, InvalidKeyReason } from "./errors.js";
export {
  classify,
  encodeKey,
  FINGERPRINT_MISMATCH,
  isProblemContentType,
  isReplayed,
  OUTCOME_UNKNOWN,
  parseProblem,
  parseRetryAfter,
  validateKey,
} from "./contract.js";
export type { HeadersLike, Verdict } from "./contract.js";
