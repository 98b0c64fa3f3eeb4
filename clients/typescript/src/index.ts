// @policyd/client: the TypeScript client of policyd, the retry-policy daemon.
//
//   const client = createClient();                  // POLICYD_ADDR, else 127.0.0.1:7433
//   const res = await client.call(
//     async ({ signal }) => checkResponse(await fetch(url, { signal })),
//     { provider: "web", operation: "web_fetch", profile: "web_fetch" },
//   );

export { ENV_TLS_CA, ENV_TLS_CERT, ENV_TLS_KEY, ENV_TOKEN, PolicydAuthError, PolicydOptionsError } from "./auth.js";
export { createClient, PolicydClient } from "./client.js";
export { type Clock, type Random, systemClock } from "./clock.js";
export {
  type Action,
  type BreakerState,
  type Classification,
  type Decision,
  explain,
  type FailureType,
  type FallbackKind,
  type FleetState,
  type Safety,
  type StopReason,
} from "./decision.js";
export {
  DEFAULT_FAIL_OPEN,
  deriveSafety,
  type FailOpenContext,
  type FailOpenOptions,
  FailOpenPolicy,
} from "./fail_open.js";
export { type Cause, emptyFailure, type Failure, failureFromError, headersOf, type Phase } from "./failure.js";
export {
  GATE_GRACE_MS,
  Gate,
  type Target,
  type GateAction,
  type GateAssignment,
  type GateFallback,
  type GateVerdict,
  PARK_LIMIT_MS,
  type Parked,
  type PriorityClass,
} from "./gate.js";
export { type FetchOptions, INPUT_TOKENS_HEADER } from "./fetch.js";
export { checkResponse, HttpError, type HttpErrorInit } from "./http_error.js";
export { type JournalOutcome, newContextId } from "./journal.js";
export {
  type Attempt,
  type CallOptions,
  type ClientOptions,
  DEFAULT_ADDRESS,
  DEFAULT_DAEMON_TIMEOUT_MS,
  type FallbackHint,
  type Logger,
} from "./options.js";
export { PolicydError, type PolicydErrorInit } from "./policyd_error.js";
export { retryAfterMs } from "./retry_after.js";
/** @internal The table and stream of the fleet gate, for the shared vectors' replay. */
export { Coordinator } from "./coordinate.js";
/** @internal The fetch transport's host table (clients/testdata/transport_hosts.json). */
export { modelOf, operationOf, PROVIDER_HOSTS, providerOf } from "./request_target.js";
/** @internal The fleet protocol's limits (clients/testdata/limits.json). */
export { FLEET_LIMITS } from "./limits.js";
/** @internal What the caller sees of the fleet gate, for the shared vectors' replay. */
export { budgetText, gateDecision } from "./texts.js";
/** @internal What a success's body says its call used, read as the SDK reads it. */
export { UsageScanner } from "./usage.js";
/** @internal A success's body as the transport hands it over, watched as it is read. */
export { ScannedResponse } from "./watched.js";
