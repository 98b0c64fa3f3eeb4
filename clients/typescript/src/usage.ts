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
 * output tokens, alike.
 */
const KEYS = [
  { key: Buffer.from('"prompt_tokens"'), output: false },
  { key: Buffer.from('"input_tokens"'), output: false },
  { key: Buffer.from('"completion_tokens"'), output: true },
  { key: Buffer.from('"output_tokens"'), output: true },
];
/** The bytes of a chunk's end kept for a key that goes on in the next one. */
const CARRY = Math.max(...KEYS.map((k) => k.key.length)) - 1;
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
  #carry: Buffer = Buffer.alloc(0);
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
      let best = -1;
      let end = -1;
      for (const k of KEYS) {
        const at = joined.indexOf(k.key);
        if (at >= 0 && at < this.#carry.length && (best < 0 || at < best)) {
          best = at;
          end = from + at + k.key.length - this.#carry.length;
          this.#outputKey = k.output;
        }
      }
      if (end >= 0) {
        this.#carry = Buffer.alloc(0);
        return end;
      }
    }
    let best = -1;
    let end = -1;
    for (const k of KEYS) {
      const at = buf.indexOf(k.key, from);
      if (at >= 0 && (best < 0 || at < best)) {
        best = at;
        end = at + k.key.length;
        this.#outputKey = k.output;
      }
    }
    if (end >= 0) {
      this.#carry = Buffer.alloc(0);
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
}
