// OpenTelemetry, when the application has it (docs/clients.md, "Tracing and
// metrics"; clients/testdata/otel.json lists every name used here). Each
// decision a call makes (policyd's NextDelay answer, the fail-open policy's
// while policyd is away, a gate stop, a park's end) is one span event
// policyd.decision on the caller's active span; the retries the call sent go
// on that span as http.request.resend_count when it ends; the global meter
// counts the retries and measures the waits.
//
// @opentelemetry/api is an optional peer dependency, required once as this
// module loads: without it callTelemetry returns undefined and a call pays
// that one check. With the API but no SDK, the active span does not record
// and the meter is the API's no-op one, so nothing is built either.

import { createRequire } from "node:module";
import type * as OTel from "@opentelemetry/api";
import type { Decision } from "./decision.js";

const require = createRequire(import.meta.url);

/** The API, or undefined when the application does not have it. */
const api: typeof OTel | undefined = (() => {
  try {
    return require("@opentelemetry/api") as typeof OTel;
  } catch {
    return undefined;
  }
})();

const SCOPE = "@policyd/client";
const EVENT = "policyd.decision";
const RETRIES = "policyd.client.retries";
const WAIT = "policyd.client.wait";
/** Waits run from a few milliseconds to minutes. */
const WAIT_BUCKETS_S = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];

/** Who made a decision (policyd.decided_by). */
type DecidedBy = "policyd" | "fail_open" | "gate";

type DecisionHook = (event: { attempt: number; error: unknown; decision: Decision }) => void;

/** The meter's instruments. */
interface Instruments {
  retries: OTel.Counter;
  wait: OTel.Histogram;
}

/** The global meter provider last seen, and its instruments (undefined: the API's no-op provider). */
let meter: { provider: OTel.MeterProvider; instruments: Instruments | undefined } | undefined;

/** The global meter's instruments, made again when the application registers another meter provider. */
function instrumentsOf(o: typeof OTel): Instruments | undefined {
  const provider = o.metrics.getMeterProvider();
  if (meter?.provider !== provider) meter = { provider, instruments: instrumentsFor(o, provider) };
  return meter.instruments;
}

function instrumentsFor(o: typeof OTel, provider: OTel.MeterProvider): Instruments | undefined {
  const m = provider.getMeter(SCOPE, version());
  if (m === o.createNoopMeter()) return undefined;
  return {
    retries: m.createCounter(RETRIES, { unit: "{retry}", description: "Retries the client sent." }),
    wait: m.createHistogram(WAIT, {
      unit: "s",
      description: "Time a call waited before an attempt: policyd.wait.kind is retry or park.",
      advice: { explicitBucketBoundaries: WAIT_BUCKETS_S },
    }),
  };
}

/** This package's version, for the meter's instrumentation scope. */
function version(): string | undefined {
  try {
    return (require("../package.json") as { version?: string }).version;
  } catch {
    return undefined;
  }
}

/**
 * @internal callTelemetry returns what records one call (started now, on
 * the caller's active span), or undefined when nothing would be recorded:
 * no API, or neither a recording span nor a meter provider.
 */
export function callTelemetry(provider: string | undefined, model: string | undefined): CallTelemetry | undefined {
  if (!api) return undefined;
  const active = api.trace.getActiveSpan();
  const span = active?.isRecording() ? active : undefined;
  const instruments = instrumentsOf(api);
  if (!span && !instruments) return undefined;
  const target: OTel.Attributes = {};
  if (provider) target["policyd.provider"] = provider;
  if (model) target["policyd.model"] = model;
  return new CallTelemetry(span, instruments, target);
}

/** @internal CallTelemetry records one call's decisions, retries and waits. */
export class CallTelemetry {
  readonly #span: OTel.Span | undefined;
  readonly #meter: Instruments | undefined;
  readonly #target: OTel.Attributes;
  /** Attempts sent so far. */
  #sent = 0;
  /** The last failure's type, for the retry it causes. */
  #failureType = "";
  /** The last RETRY decision's delay, measured when its retry is sent. */
  #retryWaitMs = 0;
  /** Between the two decisions the hook sees for a park: as it parks, and as it ends. */
  #parking = false;
  /** The last decision ended a park without admitting the call. */
  #parkStopped = false;

  constructor(span: OTel.Span | undefined, meter: Instruments | undefined, target: OTel.Attributes) {
    this.#span = span;
    this.#meter = meter;
    this.#target = target;
  }

  /**
   * hook returns the decision hook the call uses: it records the decision,
   * then calls the client's own (ClientOptions.onDecision). A decision at
   * attempt 0 is the gate's: a stop before the first attempt, or a park
   * (recorded when the park ends).
   */
  hook(next: DecisionHook | undefined): DecisionHook {
    return (event) => {
      this.decision(event.decision, event.attempt === 0 ? "gate" : event.decision.failOpen ? "fail_open" : "policyd");
      next?.(event);
    };
  }

  /**
   * decision records one decision by: a park is recorded as it ends (the
   * hook sees it start too), and a park that ended in a stop or a fallback
   * is recorded once, not again as the gate's stop that follows.
   */
  decision(d: Decision, by: DecidedBy): void {
    let parkedMs: number | undefined;
    if (d.parked) {
      this.#parking = !this.#parking;
      if (this.#parking) return;
      parkedMs = d.waitedMs ?? 0;
      this.#parkStopped = d.action !== "RETRY";
      this.#meter?.wait.record(parkedMs / 1000, { ...this.#target, "policyd.wait.kind": "park" });
    } else {
      this.#parking = false;
      const again = this.#parkStopped && by === "gate";
      this.#parkStopped = false;
      if (again) return;
    }
    if (by !== "gate") {
      this.#failureType = d.classification.failureType;
      this.#retryWaitMs = d.action === "RETRY" ? d.delayMs : 0;
    }
    if (!this.#span) return;
    const a: OTel.Attributes = {
      "policyd.attempt": this.#sent,
      "policyd.action": d.action,
      "policyd.decided_by": by,
    };
    if (by !== "gate" && d.classification.failureType) a["error.type"] = d.classification.failureType;
    if (d.action === "RETRY") a["policyd.delay_ms"] = Math.round(d.delayMs);
    else if (d.stopReason) a["policyd.stop_reason"] = d.stopReason;
    if (d.fleet?.changed && d.fleet.reason) a["policyd.fleet.reason"] = d.fleet.reason;
    if (d.action === "FALL_BACK" && (d.fallback.provider || d.fallback.model)) {
      a["policyd.fallback.target"] = `${d.fallback.provider}/${d.fallback.model}`;
    }
    if (parkedMs !== undefined) a["policyd.parked_ms"] = Math.round(parkedMs);
    this.#span.addEvent(EVENT, a);
  }

  /** attempt counts attempt n as sent; a retry is counted, and the wait its decision asked for measured. */
  attempt(n: number): void {
    this.#sent = n;
    if (n < 2 || !this.#meter) return;
    const retry: OTel.Attributes = { ...this.#target };
    if (this.#failureType) retry["error.type"] = this.#failureType;
    this.#meter.retries.add(1, retry);
    this.#meter.wait.record(this.#retryWaitMs / 1000, { ...this.#target, "policyd.wait.kind": "retry" });
  }

  /** end puts the retries the call sent on the span (semantic conventions: only when it retried). */
  end(): void {
    if (this.#span && this.#sent > 1) this.#span.setAttribute("http.request.resend_count", this.#sent - 1);
  }
}
