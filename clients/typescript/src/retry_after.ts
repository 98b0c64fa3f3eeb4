// retryAfterMs: the server's delay hint, read the way policyd reads it
// (docs/clients.md), for the fail-open policy (policyd itself reads more
// sources).

/** A hint longer than a week is ignored, as policyd ignores it. */
const MAX_HINT_MS = 7 * 24 * 3600 * 1000;

/**
 * retryAfterMs returns the server's delay hint in headers (names in lower
 * case) in milliseconds, from the most trusted source with a usable value:
 * retry-after-ms, retry-after (seconds or an HTTP-date, counted from the
 * date header when it parses, else from nowMs), x-amz-retry-after and
 * grpc-retry-pushback-ms (milliseconds). Zero and a past date are a hint of
 * 0; negative, unparsable and longer-than-a-week values are ignored;
 * undefined when no hint is usable.
 */
export function retryAfterMs(headers: Record<string, string>, nowMs: number): number | undefined {
  const ms = millis(headers["retry-after-ms"]);
  if (ms !== undefined) return ms;
  // The server's clock, when it says, is immune to skew.
  const ra = retryAfter(headers["retry-after"], httpDate(headers["date"] ?? "") ?? nowMs);
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
  const t = httpDate(v.trim());
  if (t === undefined) return undefined;
  const d = Math.max(0, t - nowMs);
  return d > MAX_HINT_MS ? undefined : d;
}

const MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];
const DAY = "(?:mon|tue|wed|thu|fri|sat|sun)";
/**
 * The HTTP-dates policyd reads: IMF-fixdate (and its one-digit-day, UTC
 * variant), RFC 850 and asctime. Date.parse is far laxer ("Retry 5" is a
 * date to it).
 */
const HTTP_DATES = [
  new RegExp(
    `^${DAY}, (?<d>\\d{1,2}) (?<m>[a-z]{3}) (?<y>\\d{4}) (?<H>\\d{1,2}):(?<M>\\d\\d):(?<S>\\d\\d) (?:gmt|utc)$`,
    "i",
  ),
  /^(?:mon|tues|wednes|thurs|fri|satur|sun)day, (?<d>\d\d)-(?<m>[a-z]{3})-(?<y>\d\d) (?<H>\d{1,2}):(?<M>\d\d):(?<S>\d\d) gmt$/i,
  new RegExp(`^${DAY} (?<m>[a-z]{3})  ?(?<d>\\d{1,2}) (?<H>\\d{1,2}):(?<M>\\d\\d):(?<S>\\d\\d) (?<y>\\d{4})$`, "i"),
];

/** An HTTP-date in ms since the epoch, or undefined. */
function httpDate(v: string): number | undefined {
  for (const re of HTTP_DATES) {
    const g = re.exec(v)?.groups;
    if (!g) continue;
    const month = MONTHS.indexOf(g["m"]!.toLowerCase());
    let year = Number(g["y"]);
    if (g["y"]!.length === 2) year += year >= 69 ? 1900 : 2000;
    const [day, h, m, s] = [g["d"], g["H"], g["M"], g["S"]].map(Number) as [number, number, number, number];
    const t = Date.UTC(year, month, day, h, m, s);
    // Date.UTC rolls 32 January over into February: refuse what does not round-trip.
    if (month < 0 || h > 23 || m > 59 || s > 59 || new Date(t).getUTCDate() !== day) return undefined;
    return t;
  }
  return undefined;
}
