// HttpError: a non-2xx fetch Response as an error, its body text read, so
// that policyd sees the status, the headers and what the server said.

/** The most of a body HttpError reads: policyd reads no more. */
const MAX_BODY_BYTES = 64 << 10;

/** What HttpError is made of. */
export interface HttpErrorInit {
  status: number;
  statusText?: string;
  /** Response headers; names are stored in lower case. */
  headers?: Record<string, string> | Headers;
  /** The response body text. */
  body?: string;
  url?: string;
  /** The request's HTTP method, e.g. "GET"; it tells policyd whether a retry is safe. */
  method?: string;
  response?: Response;
}

/**
 * HttpError is a failed HTTP response: status, headers (lower-case names),
 * the first 64 KiB of the body text, and the request's URL and method.
 * Make one with checkResponse or HttpError.fromResponse.
 */
export class HttpError extends Error {
  override name = "HttpError";
  /** The HTTP status, e.g. 503. */
  readonly status: number;
  readonly statusText: string;
  /** Response headers, names in lower case. */
  readonly headers: Record<string, string>;
  /** The body text (at most 64 KiB of it). */
  readonly body: string;
  readonly url: string;
  /** The request's method, upper case; "" when not known. */
  readonly method: string;
  /** The Response, its body consumed; undefined when made by hand. */
  readonly response: Response | undefined;

  constructor(init: HttpErrorInit) {
    const method = (init.method ?? "").toUpperCase();
    const where = [method, init.url].filter(Boolean).join(" ");
    super(`HTTP ${init.status}${init.statusText ? " " + init.statusText : ""}${where ? ` (${where})` : ""}`);
    this.status = init.status;
    this.statusText = init.statusText ?? "";
    const headers: Record<string, string> = {};
    if (init.headers instanceof Headers) {
      init.headers.forEach((v, k) => {
        headers[k.toLowerCase()] = v;
      });
    } else if (init.headers) {
      for (const [k, v] of Object.entries(init.headers)) headers[k.toLowerCase()] = v;
    }
    this.headers = headers;
    this.body = init.body ?? "";
    this.url = init.url ?? "";
    this.method = method;
    this.response = init.response;
  }

  /**
   * fromResponse reads the first 64 KiB of response's body (the rest is
   * discarded) and returns the HttpError. A body that fails to read (the
   * connection dropped) leaves what was read.
   */
  static async fromResponse(response: Response, options: { method?: string } = {}): Promise<HttpError> {
    const body = await readBody(response);
    const init: HttpErrorInit = {
      status: response.status,
      statusText: response.statusText,
      headers: response.headers,
      body,
      url: response.url,
      response,
    };
    if (options.method !== undefined) init.method = options.method;
    return new HttpError(init);
  }
}

/**
 * checkResponse returns response when its status is 2xx; otherwise it reads
 * the body and throws an HttpError, which is what policyd needs to classify
 * the failure. Use it on every fetch inside `client.call`:
 * `checkResponse(await fetch(url, { signal }))`.
 */
export async function checkResponse(response: Response, options: { method?: string } = {}): Promise<Response> {
  if (response.ok) return response;
  throw await HttpError.fromResponse(response, options);
}

async function readBody(response: Response): Promise<string> {
  if (!response.body) return "";
  if (response.bodyUsed) return "";
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let text = "";
  let bytes = 0;
  try {
    while (bytes < MAX_BODY_BYTES) {
      const { done, value } = await reader.read();
      if (done) break;
      const chunk = value.byteLength + bytes > MAX_BODY_BYTES ? value.subarray(0, MAX_BODY_BYTES - bytes) : value;
      bytes += chunk.byteLength;
      text += decoder.decode(chunk, { stream: true });
    }
    text += decoder.decode();
  } catch {
    // The connection broke while reading the body: keep what arrived.
  } finally {
    reader.cancel().catch(() => {});
  }
  return text;
}
