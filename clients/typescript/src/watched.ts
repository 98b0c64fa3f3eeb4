// A success's body as the fetch transport (fetch.ts) hands it to the SDK
// (docs/clients.md, "The transport"): watched as it is read, so that what
// the body says its call used (usage.ts) is read as the SDK reads it,
// never held up or buffered, and so that the end of a stream is known.

import type { UsageScanner } from "./usage.js";

const noop = () => {};

/** The wrapper's queue holds nothing: each chunk is read from the response's body when its reader asks. */
const PULLED: QueuingStrategy<Uint8Array> = Object.freeze({ highWaterMark: 0 });

/**
 * @internal watched is res with a body that passes res's through as it
 * comes (watchedBody): its status, headers and url.
 */
export function watched(
  res: Response,
  ended: () => void,
  cut: (err: unknown) => void,
  scan?: UsageScanner,
  output: (n: number) => void = noop,
): Response {
  return withUrl(new Response(watchedBody(res, ended, cut, scan, output), initOf(res)), res.url);
}

/**
 * watchedBody passes res's body through as it comes (each chunk unchanged,
 * shown to scan first, if given) and tells when it ends (ended: done,
 * cancelled or cut), when it is cut (cut: the read failed after the
 * response began), and, when it ends or is cancelled but not cut, the last
 * output count scan read (output).
 */
function watchedBody(
  res: Response,
  ended: () => void,
  cut: (err: unknown) => void,
  scan: UsageScanner | undefined,
  output: (n: number) => void,
): ReadableStream<Uint8Array> {
  const counted = (): void => {
    if (scan?.output !== undefined) output(scan.output);
  };
  const reader = res.body!.getReader();
  let controller!: ReadableStreamDefaultController<Uint8Array>;
  // The read's handlers are made once a body, not once a chunk.
  const chunked = (chunk: Awaited<ReturnType<typeof reader.read>>): void => {
    if (chunk.done) {
      ended();
      counted();
      controller.close();
    } else {
      scan?.push(chunk.value);
      controller.enqueue(chunk.value);
    }
  };
  const failed = (err: unknown): void => {
    ended();
    cut(err);
    controller.error(err);
  };
  return new ReadableStream<Uint8Array>(
    {
      start(c) {
        controller = c;
      },
      // A promise chain, not an async function: one turn of the microtask queue less a chunk.
      pull: () => reader.read().then(chunked, failed),
      cancel(reason) {
        ended();
        counted();
        return reader.cancel(reason);
      },
    },
    PULLED,
  );
}

const utf8 = new TextDecoder();

/**
 * @internal ScannedResponse is a success whose body scan reads, other than
 * a stream (a JSON body, which the SDKs read whole: json(), text()). It is
 * res as watched makes it, without a second stream until one is asked for:
 * arrayBuffer, bytes, text and json read res's body whole, as res would,
 * and show it to scan in one piece, which finds what chunk by chunk would
 * (a key split anywhere is found alike), then the output count; body, and
 * blob, formData and clone, which read it, are watchedBody's stream, made
 * at its first use. Its headers are res's own and its url res's. A second
 * stream, its reads and a copy of the headers were most of what the
 * transport added to a request (docs/benchmarks.md, "The clients'
 * transports"); a body read whole needs none of them.
 */
export class ScannedResponse extends Response {
  readonly #res: Response;
  readonly #scan: UsageScanner;
  readonly #output: (n: number) => void;
  #body: ReadableStream<Uint8Array> | undefined;

  constructor(res: Response, scan: UsageScanner, output: (n: number) => void) {
    // No copy of the headers: headers reads res's own (see below).
    super(null, { status: res.status, statusText: res.statusText });
    this.#res = res;
    this.#scan = scan;
    this.#output = output;
  }

  static {
    // Response's typings declare its body and its readers as fields, which a class cannot override.
    const proto = ScannedResponse.prototype;
    const readers: Record<string, (this: ScannedResponse) => Promise<unknown>> = {
      arrayBuffer() {
        return this.#whole();
      },
      bytes() {
        return this.#whole().then((buf) => new Uint8Array(buf));
      },
      text() {
        return this.#whole().then((buf) => utf8.decode(buf));
      },
      json() {
        return this.#whole().then((buf) => JSON.parse(utf8.decode(buf)) as unknown);
      },
      blob() {
        return this.#viaStream((r) => r.blob());
      },
      formData() {
        return this.#viaStream((r) => r.formData());
      },
    };
    for (const [name, value] of Object.entries(readers)) {
      Object.defineProperty(proto, name, { value, writable: true, configurable: true });
    }
    Object.defineProperties(proto, {
      // res's own, as they came (a fetched response's cannot be changed): no copy to make.
      headers: {
        get(this: ScannedResponse) {
          return this.#res.headers;
        },
        configurable: true,
      },
      url: {
        get(this: ScannedResponse) {
          return this.#res.url;
        },
        configurable: true,
      },
      body: {
        get(this: ScannedResponse) {
          return this.#stream();
        },
        configurable: true,
      },
      bodyUsed: {
        // res's body is read by every reader here (the stream's pulls included), and cancelled by its cancel.
        get(this: ScannedResponse) {
          return this.#res.bodyUsed;
        },
        configurable: true,
      },
      clone: {
        value(this: ScannedResponse): Response {
          const body = this.#stream();
          if (this.#res.bodyUsed || body.locked) throw new TypeError("Response.clone: Body has already been consumed.");
          const [mine, theirs] = body.tee();
          this.#body = mine;
          return withUrl(new Response(theirs, initOf(this)), this.#res.url);
        },
        writable: true,
        configurable: true,
      },
    });
  }

  /**
   * The watched stream of res's body, made at its first use; res's own
   * once it was read whole (or is being read): used, as a read body is.
   */
  #stream(): ReadableStream<Uint8Array> {
    if (this.#body) return this.#body;
    const body = this.#res.body!;
    if (body.locked || this.#res.bodyUsed) return body;
    this.#body = watchedBody(this.#res, noop, noop, this.#scan, this.#output);
    return this.#body;
  }

  /** The whole body: res's read at once, shown to scan; once a stream was made, the stream's. */
  #whole(): Promise<ArrayBuffer> {
    if (this.#body) return this.#viaStream((r) => r.arrayBuffer());
    return this.#res.arrayBuffer().then((buf) => {
      this.#scan.push(new Uint8Array(buf));
      if (this.#scan.output !== undefined) this.#output(this.#scan.output);
      return buf;
    });
  }

  /** read of a Response over the watched stream (what read rejects with when the body is unusable). */
  #viaStream<T>(read: (r: Response) => Promise<T>): Promise<T> {
    try {
      return read(new Response(this.#stream(), initOf(this)));
    } catch (err) {
      return Promise.reject(err);
    }
  }
}

/** What a copy of res takes of it besides its body. */
function initOf(res: Response): ResponseInit {
  return { status: res.status, statusText: res.statusText, headers: res.headers };
}

/** out, whose url reads url (a Response made anew has none). */
function withUrl(out: Response, url: string): Response {
  Object.defineProperty(out, "url", { value: url });
  return out;
}
