// UsageScanner: the first "prompt_tokens" or "input_tokens" count of a
// body and its last "completion_tokens" or "output_tokens" count, read
// chunk by chunk as the SDK reads it (docs/clients.md, the transport's
// item 3).

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { UsageScanner } from "@policyd/client";

/** What a scanner reports of body pushed in the given chunks: the counts found (at most one). */
function scan(...chunks: string[]): number[] {
  const found: number[] = [];
  const s = new UsageScanner((n) => found.push(n));
  for (const c of chunks) s.push(Buffer.from(c));
  return found;
}

/** The last output count a scanner holds after body pushed in the given chunks. */
function output(...chunks: string[]): number | undefined {
  const s = new UsageScanner(() => {});
  for (const c of chunks) s.push(Buffer.from(c));
  return s.output;
}

/** Every way of cutting body in two, and in three around each split, must find the same. */
function everySplit(body: string): number[][] {
  const out: number[][] = [];
  for (let i = 0; i <= body.length; i++) {
    out.push(scan(body.slice(0, i), body.slice(i)));
    for (let j = i; j <= Math.min(body.length, i + 3); j++) {
      out.push(scan(body.slice(0, i), body.slice(i, j), body.slice(j)));
    }
  }
  return out;
}

const openai = `{"id":"chatcmpl-1","choices":[],"usage":{"prompt_tokens":1234,"completion_tokens":5,"total_tokens":1239}}`;
const anthropicEvents =
  `event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":321,"output_tokens":1}}}\n\n` +
  `event: message_delta\ndata: {"type":"message_delta","usage":{"output_tokens":20}}\n\n`;

describe("UsageScanner", () => {
  const cases: { name: string; chunks: string[]; want: number[] }[] = [
    { name: "OpenAI's prompt_tokens, in one chunk", chunks: [openai], want: [1234] },
    { name: "Anthropic's input_tokens in an SSE stream", chunks: [anthropicEvents], want: [321] },
    {
      name: "white space around the colon",
      chunks: ['{"usage": {"input_tokens" \n:\t \r\n 42 , "output_tokens": 1}}'],
      want: [42],
    },
    {
      name: "input_tokens_details is not the count",
      chunks: ['{"usage":{"input_tokens_details":{"cached_tokens":9},"input_tokens":77}}'],
      want: [77],
    },
    {
      name: "only input_tokens_details: no count",
      chunks: ['{"usage":{"input_tokens_details":{"cached_tokens":9}}}'],
      want: [],
    },
    {
      name: "another key ending in input_tokens is not the count",
      chunks: ['{"usage":{"cache_creation_input_tokens":500,"input_tokens":12}}'],
      want: [12],
    },
    {
      name: "the first count only",
      chunks: ['{"a":{"prompt_tokens":1}}', '{"b":{"input_tokens":2,"prompt_tokens":3}}'],
      want: [1],
    },
    { name: "null is passed over for the next count", chunks: ['{"input_tokens":null,"prompt_tokens":8}'], want: [8] },
    {
      name: "the key's text inside a string is not a key",
      chunks: ['{"content":"say \\"input_tokens\\": 99","usage":{"input_tokens":6}}'],
      want: [6],
    },
    { name: "no count: nothing", chunks: ['{"id":"x","choices":[{"message":{"content":"hi"}}]}'], want: [] },
    { name: "a body cut before the count: nothing", chunks: ['{"usage":{"prompt_tok'], want: [] },
    { name: "a body cut after the colon: nothing", chunks: ['{"usage":{"prompt_tokens": '], want: [] },
    { name: "a body cut inside the number: nothing", chunks: ['{"usage":{"prompt_tokens":12'], want: [] },
    { name: "an empty body: nothing", chunks: [], want: [] },
    {
      name: "a key split over many one-byte chunks",
      chunks: [...'xx{"input_tokens": 4096}'],
      want: [4096],
    },
  ];
  for (const c of cases) {
    test(c.name, () => assert.deepEqual(scan(...c.chunks), c.want));
  }

  test("a key, its colon and its number split anywhere across chunks", () => {
    for (const [body, want] of [
      [openai, 1234],
      [anthropicEvents, 321],
      ['{"usage":{"input_tokens_details":{},"input_tokens" : 55}}', 55],
    ] as const) {
      for (const got of everySplit(body)) assert.deepEqual(got, [want], body);
    }
  });

  test("the input count is found once", () => {
    const found: number[] = [];
    const s = new UsageScanner((n) => found.push(n));
    s.push(Buffer.from('{"prompt_tokens":3,'));
    s.push(Buffer.from('"input_tokens":4}'));
    assert.deepEqual(found, [3]);
  });

  const responsesEvents =
    `event: response.completed\ndata: {"type":"response.completed","response":{"usage":{"input_tokens":36,` +
    `"input_tokens_details":{"cached_tokens":0},"output_tokens":87,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":123}}}\n\n`;
  const outputCases: { name: string; body: string; want: number | undefined }[] = [
    { name: "OpenAI's completion_tokens", body: openai, want: 5 },
    // message_start says 1, message_delta at the stream's end 20: the last is the call's.
    { name: "Anthropic's stream: message_delta's output_tokens, the last", body: anthropicEvents, want: 20 },
    { name: "OpenAI's Responses stream: response.completed", body: responsesEvents, want: 87 },
    { name: "Anthropic's message", body: '{"usage":{"input_tokens":42,"output_tokens":9}}', want: 9 },
    { name: "no output count", body: '{"usage":{"input_tokens":3}}', want: undefined },
    {
      name: "a body cut inside the output number",
      body: '{"usage":{"input_tokens":3,"output_tokens":12',
      want: undefined,
    },
  ];
  for (const c of outputCases) {
    test(`output: ${c.name}, split anywhere`, () => {
      assert.equal(output(c.body), c.want);
      for (let i = 0; i <= c.body.length; i++)
        assert.equal(output(c.body.slice(0, i), c.body.slice(i)), c.want, `split at ${i}`);
      assert.equal(output(...c.body), c.want, "a byte at a time");
    });
  }

  test("a chunk that is a view into a larger buffer is read at its offset", () => {
    const whole = Buffer.from('AAAA{"input_tokens":17}BBBB');
    const found: number[] = [];
    new UsageScanner((n) => found.push(n)).push(new Uint8Array(whole.buffer, whole.byteOffset + 4, whole.length - 8));
    assert.deepEqual(found, [17]);
  });
});
