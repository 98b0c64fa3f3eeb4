// UsageScanner: what a success's body says its call used (docs/clients.md,
// "The transport", what a success used): the first "prompt_tokens" or
// "input_tokens" count, and the last "completion_tokens" or
// "output_tokens" count (Anthropic's stream says it twice: a small count in
// message_start, the final one in message_delta at its end), in a JSON body
// or an SSE stream, read from the chunks as the SDK reads them (never
// holding the body up or buffering it), a key split across two chunks
// included.

/**
 * The keys whose count is the call's input tokens (OpenAI's chat, then
 * Anthropic's and OpenAI's Responses API's), and those whose count is its
 * output tokens, alike: each is a prefix before ANCHOR, the end they share,
 * so that a chunk is searched once (Buffer.indexOf) for all four.
 */
/** An empty carry. */
const EMPTY = Buffer.alloc(0);
const ANCHOR = Buffer.from('_tokens"');
const KEYS = [
  { prefix: Buffer.from('"prompt'), output: false },
  { prefix: Buffer.from('"input'), output: false },
  { prefix: Buffer.from('"completion'), output: true },
  { prefix: Buffer.from('"output'), output: true },
];
/** The bytes of a chunk's end kept for a key that goes on in the next one. */
const CARRY = Math.max(...KEYS.map((k) => k.prefix.length)) + ANCHOR.length - 1;
/** More digits than any count: the rest of a longer number is read, not counted. */
const MAX_DIGITS = 15;

const COLON = 0x3a;
const ZERO = 0x30;
const NINE = 0x39;

/** Whether b is JSON white space. */
function isSpace(b: number): boolean {
  return b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09;
}

/** Where the scanner is: in search of a key, past one (before its colon, after it), or in its digits. */
const enum State {
  Search,
  Colon,
  Value,
  Digits,
}

/**
 * @internal UsageScanner reads the chunks of one body (push) for the first
 * count of input tokens, and the last of output tokens. found is called
 * once, with the input count, when it has ended (a digit's follower read),
 * so that a body cut inside the number counts nothing; output is the last
 * output count read so far (undefined: none), the call's once the body has
 * ended. A key whose value is not a number (null) is passed over for the
 * next. It never throws.
 */
export class UsageScanner {
  #state = State.Search;
  /** The last bytes searched (at most CARRY), for a key split across chunks. */
  #carry: Buffer = EMPTY;
  #count = 0;
  #digits = 0;
  /** The key being read counts output tokens; the input count was found. */
  #outputKey = false;
  #foundInput = false;
  readonly #found: (count: number) => void;
  /** The last output count read (undefined: none yet). */
  output: number | undefined;

  constructor(found: (count: number) => void) {
    this.#found = found;
  }

  /** push scans the next chunk of the body. */
  push(chunk: Uint8Array): void {
    const buf = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    let i = 0;
    while (i < buf.length) {
      if (this.#state === State.Search) {
        i = this.#search(buf, i);
        if (i < 0) return;
        this.#state = State.Colon;
        continue;
      }
      const b = buf[i++]!;
      if (this.#state === State.Colon) {
        if (b === COLON) this.#state = State.Value;
        else if (!isSpace(b)) [this.#state, i] = [State.Search, i - 1]; // a string's text, not a key
      } else if (this.#state === State.Value) {
        if (b >= ZERO && b <= NINE) [this.#state, this.#count, this.#digits] = [State.Digits, b - ZERO, 1];
        else if (!isSpace(b)) [this.#state, i] = [State.Search, i - 1]; // null, or not a count
      } else if (b >= ZERO && b <= NINE) {
        if (++this.#digits <= MAX_DIGITS) this.#count = this.#count * 10 + (b - ZERO);
      } else if (b === 0x2e || b === 0x65 || b === 0x45) {
        this.#state = State.Search; // a fraction or an exponent: not a count
      } else {
        [this.#state, i] = [State.Search, i - 1];
        if (this.#outputKey) this.output = this.#count;
        else if (!this.#foundInput) {
          this.#foundInput = true;
          this.#found(this.#count);
        }
      }
    }
  }

  /**
   * #search finds the first key in buf from `from` on, or one begun in the
   * carried bytes of the chunks before, and returns the index just past
   * it (#outputKey says what it counts); -1 when there is none (the chunk's
   * end is carried).
   */
  #search(buf: Buffer, from: number): number {
    if (this.#carry.length > 0) {
      const joined = Buffer.concat([this.#carry, buf.subarray(from, from + CARRY)]);
      const end = this.#find(joined, 0, this.#carry.length);
      if (end >= 0) {
        const past = from + end - this.#carry.length;
        this.#carry = EMPTY;
        return past;
      }
    }
    const end = this.#find(buf, from, buf.length);
    if (end >= 0) {
      this.#carry = EMPTY;
      return end;
    }
    // The chunk's last bytes; a chunk shorter than that keeps the carry's end before it.
    const rest = buf.subarray(from);
    this.#carry =
      rest.length >= CARRY
        ? Buffer.from(rest.subarray(rest.length - CARRY))
        : Buffer.concat([this.#carry, rest]).subarray(-CARRY);
    return -1;
  }

  /**
   * #find returns the index just past the first key in buf that starts at
   * or after from and before startsBefore (#outputKey says what it counts);
   * -1 when there is none. Keys cannot overlap (each starts with a quote
   * that no other holds inside), so the first anchor that ends a key ends
   * the first key.
   */
  #find(buf: Buffer, from: number, startsBefore: number): number {
    for (let at = buf.indexOf(ANCHOR, from); at >= 0; at = buf.indexOf(ANCHOR, at + 1)) {
      for (const k of KEYS) {
        const start = at - k.prefix.length;
        if (start < from || !endsWith(buf, at, k.prefix)) continue;
        if (start >= startsBefore) return -1; // the first key starts too late; later ones later still
        this.#outputKey = k.output;
        return at + ANCHOR.length;
      }
    }
    return -1;
  }
}

/** Whether buf holds prefix just before index at (at >= prefix.length). */
function endsWith(buf: Buffer, at: number, prefix: Buffer): boolean {
  for (let i = prefix.length - 1, j = at - 1; i >= 0; i--, j--) if (buf[j] !== prefix[i]) return false;
  return true;
}
