// @policyd/client: the TypeScript client of policyd, the retry-policy daemon.
//
//   const client = createClient();                  // POLICYD_ADDR, else 127.0.0.1:7433
//   const res = await client.call(
//     async ({ signal }) => checkResponse(await fetch(url, { signal })),
//     { provider: "web", operation: "web_fetch", profile: "web_fetch" },
//   );

export {
  createClient,
  PolicydClient,
  DEFAULT_ADDRESS,
  DEFAULT_DAEMON_TIMEOUT_MS,
  type Attempt,
  type CallOptions,
  type ClientOptions,
  type FallbackHint,
  type Logger,
} from "./client.js";
export { type Clock, type Random, systemClock } from "./clock.js";
export {
  type Action,
  type BreakerState,
  type Classification,
  type Decision,
  type FailureType,
  type FallbackKind,
  type FleetState,
  type Safety,
  type StopReason,
  explain,
} from "./decision.js";
export { DEFAULT_FAIL_OPEN, FailOpenPolicy, deriveSafety, type FailOpenContext, type FailOpenOptions } from "./fail_open.js";
export { type Cause, type Failure, type Phase, emptyFailure, failureFromError, headersOf } from "./failure.js";
export { HttpError, checkResponse, type HttpErrorInit } from "./http_error.js";
export { type JournalOutcome } from "./journal.js";
export { PolicydError, type PolicydErrorInit } from "./policyd_error.js";
export { PolicydAuthError, ENV_TOKEN, ENV_TLS_CA, ENV_TLS_CERT, ENV_TLS_KEY } from "./auth.js";
export { retryAfterMs } from "./retry_after.js";
