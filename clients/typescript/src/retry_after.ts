// retryAfterMs: the server's delay hint, read the way policyd reads it, for
// the fail-open policy (policyd itself reads more sources).

/** A hint longer than a week is ignored, as policyd ignores it. */
const MAX_HINT_MS = 7 * 24 * 3600 * 1000;

/**
 * retryAfterMs returns the server's delay hint in headers (names in lower
 * case) in milliseconds, from the most precise source present:
 * retry-after-ms, retry-after (seconds or an HTTP-date, counted from
 * nowMs; a past date is 0), x-amz-retry-after and grpc-retry-pushback-ms
 * (milliseconds). Negative, unparsable and longer-than-a-week values are
 * ignored; undefined when no hint is usable.
 */
export function retryAfterMs(headers: Record<string, string>, nowMs: number): number | undefined {
  const ms = millis(headers["retry-after-ms"]);
  if (ms !== undefined) return ms;
  const ra = retryAfter(headers["retry-after"], nowMs);
  if (ra !== undefined) return ra;
  for (const name of ["x-amz-retry-after", "grpc-retry-pushback-ms"]) {
    const v = millis(headers[name]);
    if (v !== undefined) return v;
  }
  return undefined;
}

function number(v: string): number | undefined {
  const s = v.trim();
  if (!/^[+]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(s)) return undefined;
  return Number(s);
}

function millis(v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const n = number(v);
  if (n === undefined || !Number.isFinite(n) || n > MAX_HINT_MS) return undefined;
  return n;
}

function retryAfter(v: string | undefined, nowMs: number): number | undefined {
  if (v === undefined || v.trim() === "") return undefined;
  const s = number(v);
  if (s !== undefined) {
    return Number.isFinite(s) && s * 1000 <= MAX_HINT_MS ? s * 1000 : undefined;
  }
  // An HTTP-date (IMF-fixdate, RFC 850 or asctime); Date.parse reads all three.
  if (!/[a-z]/i.test(v)) return undefined;
  const t = Date.parse(v);
  if (Number.isNaN(t)) return undefined;
  const d = Math.max(0, t - nowMs);
  return d > MAX_HINT_MS ? undefined : d;
}
