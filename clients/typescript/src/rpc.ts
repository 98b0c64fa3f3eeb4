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
