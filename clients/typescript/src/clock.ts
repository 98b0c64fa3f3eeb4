// Clock: the client's source of time, injectable so that tests run long
// retry sequences without sleeping.

/**
 * Clock gives the time (milliseconds since the epoch, as Date.now) and
 * waits. sleep resolves after ms milliseconds, or rejects with
 * signal.reason as soon as signal aborts (at once when it already has).
 */
export interface Clock {
  now(): number;
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

/** A random source: a float in [0, 1), as Math.random. */
export type Random = () => number;

/** systemClock is the real clock: Date.now and setTimeout. */
export const systemClock: Clock = {
  now: () => Date.now(),
  sleep: (ms, signal) => abortableSleep(ms, signal),
};

/** @internal sleep on setTimeout, ended at once by signal. */
export function abortableSleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    if (ms <= 0) {
      resolve();
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
