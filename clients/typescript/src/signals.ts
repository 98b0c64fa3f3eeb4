// The abort signals of a call and of its attempts. A call's signal (Budget)
// aborts when the caller's does or when the call's deadline passes, and
// tells which; an attempt's (AttemptSignal) adds the attempt's own
// timeout. They exist as classes, not AbortSignal.any and
// AbortSignal.timeout, because they hold their parts strongly: Node 20 may
// garbage-collect a combined signal before it fires.

/**
 * @internal AttemptSignal is one attempt's signal: the call's, and the
 * attempt's own timeout when there is one. It holds its parts strongly, so
 * that none is collected before it fires.
 */
export class AttemptSignal {
  readonly #controller: AbortController | undefined;
  readonly #parent: AbortSignal;
  readonly #timer: ReturnType<typeof setTimeout> | undefined;
  /** The parent's listener, made only when there is a timeout (most attempts have none). */
  readonly #onAbort: (() => void) | undefined;

  constructor(parent: AbortSignal, timeoutMs: number | undefined) {
    this.#parent = parent;
    if (timeoutMs === undefined || timeoutMs <= 0 || parent.aborted) return;
    this.#controller = new AbortController();
    this.#onAbort = () => this.#controller?.abort(this.#parent.reason);
    parent.addEventListener("abort", this.#onAbort, { once: true });
    const controller = this.#controller;
    this.#timer = setTimeout(
      () => controller.abort(new DOMException(`the attempt timed out after ${timeoutMs}ms`, "TimeoutError")),
      timeoutMs,
    );
  }

  get signal(): AbortSignal {
    return this.#controller?.signal ?? this.#parent;
  }

  dispose(): void {
    if (!this.#controller) return; // nothing was added to the parent
    clearTimeout(this.#timer);
    this.#parent.removeEventListener("abort", this.#onAbort!);
  }
}

/**
 * @internal Budget is the call's signal: it aborts when the caller's signal
 * aborts (with its reason) or when the deadline passes (with a TimeoutError).
 * Without a deadline it is the caller's signal itself: an AbortController
 * costs more than many a call's whole overhead.
 */
export class Budget {
  readonly #controller: AbortController | undefined;
  readonly #signal: AbortSignal;
  readonly #timer: ReturnType<typeof setTimeout> | undefined;
  readonly #caller: AbortSignal | undefined;
  /** The caller's listener, made only when the call has a controller of its own. */
  readonly #onAbort: (() => void) | undefined;
  #expired = false;

  constructor(caller: AbortSignal | undefined, remainingMs: number | undefined) {
    this.#caller = caller;
    if (caller && remainingMs === undefined) {
      this.#signal = caller;
      return;
    }
    const controller = new AbortController();
    this.#controller = controller;
    this.#signal = controller.signal;
    if (caller) {
      if (caller.aborted) controller.abort(caller.reason);
      else {
        this.#onAbort = () => this.#controller?.abort(caller.reason);
        caller.addEventListener("abort", this.#onAbort, { once: true });
      }
    }
    if (remainingMs !== undefined) {
      const fire = () => {
        this.#expired = true;
        controller.abort(new DOMException("the call's deadline passed", "TimeoutError"));
      };
      if (remainingMs <= 0) fire();
      else this.#timer = setTimeout(fire, remainingMs);
    }
  }

  get signal(): AbortSignal {
    return this.#signal;
  }

  /** Whether the deadline (not the caller) ended the call. */
  get expired(): boolean {
    return this.#expired;
  }

  dispose(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    if (this.#onAbort) this.#caller?.removeEventListener("abort", this.#onAbort);
  }
}
