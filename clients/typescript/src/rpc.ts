// What an RPC to policyd answers, and how its failure codes are read.

import { Code, type ConnectError } from "@connectrpc/connect";

/** @internal The options of one RPC. */
export interface RpcOptions {
  signal?: AbortSignal;
  timeoutMs: number;
}

/** @internal An RPC's answer, or its code when it failed (undefined: not sent, or aborted by the caller). */
export type RpcResult<R> = { ok: true; value: R } | { ok: false; code: Code | undefined; error?: ConnectError };

/** @internal Codes with which the journal RPCs say policyd runs without a database. */
export const JOURNAL_OFF = new Set([Code.FailedPrecondition, Code.Unimplemented]);

/** @internal Codes that mean policyd answered and refused the request (it is reachable). */
export const REFUSED = new Set([
  Code.InvalidArgument,
  Code.NotFound,
  Code.FailedPrecondition,
  Code.AlreadyExists,
  Code.OutOfRange,
  Code.PermissionDenied,
  Code.Unauthenticated,
  Code.Unimplemented,
]);

/** The failure fields a call's options set; the others come from the attempt's error. */
const CALLER_FAILURE_FIELDS = new Set([
  "failure.provider",
  "failure.model",
  "failure.operation",
  "failure.method",
  "failure.key_id",
]);

/**
 * @internal callerMistake reports whether a daemon's answer is a mistake in
 * the caller's configuration, which every client raises instead of failing
 * open (clients/testdata/refusals.json): UNAUTHENTICATED, and
 * INVALID_ARGUMENT naming any field but one mapped from the attempt's error.
 * The daemon's message starts with the field's path ("profile: …",
 * "failure.headers: …"); an odd value the error gave is no reason to stop
 * retrying.
 */
export function callerMistake(code: Code, message: string): boolean {
  if (code === Code.Unauthenticated) return true;
  if (code !== Code.InvalidArgument) return false;
  const i = message.indexOf(": ");
  if (i < 0) return true;
  const field = message.slice(0, i);
  if (field !== "failure" && !field.startsWith("failure.")) return true;
  return CALLER_FAILURE_FIELDS.has(field);
}
