// What a request through the fetch transport (fetch.ts) calls, when the
// transport's options do not say (docs/clients.md, "The transport"): the
// provider from the URL's host, else its path; the model from the JSON
// body, else a Gemini-style path. clients/testdata/transport_hosts.json
// holds the same host table and the cases every client passes.

/** API hosts and their providers; "*." matches any subdomain. */
export const PROVIDER_HOSTS: Readonly<Record<string, string>> = Object.freeze({
  "api.openai.com": "openai",
  "api.anthropic.com": "anthropic",
  "generativelanguage.googleapis.com": "google",
  "*.openai.azure.com": "azure",
  "api.mistral.ai": "mistral",
  "api.groq.com": "groq",
  "api.deepseek.com": "deepseek",
  "openrouter.ai": "openrouter",
});

/** A body larger than this is passed on without reading its model. */
export const MAX_MODEL_BODY_BYTES = 8 << 20;

const EXACT = new Map<string, string>();
const SUFFIXES: [string, string][] = [];
for (const [host, provider] of Object.entries(PROVIDER_HOSTS)) {
  if (host.startsWith("*.")) SUFFIXES.push([host.slice(1), provider]);
  else EXACT.set(host, provider);
}

/** providerOf is the provider url calls: by its host, else its path, else "unknown". */
export function providerOf(url: URL): string {
  const host = url.hostname.toLowerCase().replace(/\.$/, "");
  const exact = EXACT.get(host);
  if (exact) return exact;
  for (const [suffix, provider] of SUFFIXES) if (host.endsWith(suffix)) return provider;
  const segments = url.pathname.split("/");
  for (let i = 0; i < segments.length; i++) {
    const s = segments[i];
    const next = segments[i + 1];
    if (s === "v1" && next === "messages") return "anthropic";
    if ((s === "chat" && next === "completions") || s === "responses") return "openai";
  }
  return "unknown";
}

/**
 * modelOf is the model a request names: the top-level string "model" of a
 * JSON object body (body: its text, undefined when it is not text or too
 * large), else a path segment "models/{model}:{method}"; "" when neither.
 */
export function modelOf(body: string | undefined, url: URL): string {
  return bodyModelOf(body) || pathModelOf(url.pathname);
}

const MODEL_FIRST = '{"model":"';

/** bodyModelOf is the top-level string "model" of a JSON object body; "" when there is none. */
export function bodyModelOf(body: string | undefined): string {
  if (body === undefined || body.length > MAX_MODEL_BODY_BYTES || !body.includes('"model"')) return "";
  if (body.startsWith(MODEL_FIRST)) {
    // JSON.stringify({ model, ... }), as the SDKs send it: no need to parse the rest.
    const end = body.indexOf('"', MODEL_FIRST.length);
    const model = body.slice(MODEL_FIRST.length, end);
    if (end > 0 && !model.includes("\\")) return model;
  }
  if (firstChar(body) !== "{") return "";
  try {
    const model = (JSON.parse(body) as Record<string, unknown> | null)?.["model"];
    return typeof model === "string" ? model : "";
  } catch {
    return ""; // not JSON: no model from the body
  }
}

/** pathModelOf is the model of a Gemini-style path, ".../models/{model}:{method}"; "" when it is not one. */
export function pathModelOf(pathname: string): string {
  const m = /(?:^|\/)models\/([^/:]+):[^/]+$/.exec(pathname);
  if (!m) return "";
  try {
    return decodeURIComponent(m[1]!);
  } catch {
    return m[1]!; // not percent-encoded as it should be: as it stands
  }
}

// The operations a model API's path names (the path's end, the longest first):
// policyd treats model operations as safe to repeat whatever the method.
const OPERATIONS: readonly [string, string][] = [
  ["/chat/completions", "chat"],
  ["/messages/count_tokens", "messages.count_tokens"],
  ["/completions", "completion"],
  ["/responses", "responses"],
  ["/embeddings", "embeddings"],
  ["/messages", "messages"],
];
const GEMINI_OPERATIONS: Readonly<Record<string, string>> = {
  generateContent: "generate_content",
  streamGenerateContent: "generate_content",
  countTokens: "model.count_tokens",
  embedContent: "embed_content",
  batchEmbedContents: "embed_content",
};

/**
 * operationOf is the operation a model API's path names ("chat",
 * "messages", "generate_content", ...); "" for any other path, whose method
 * then decides whether it may be repeated.
 */
export function operationOf(pathname: string): string {
  const path = pathname.replace(/\/+$/, "");
  const last = path.slice(path.lastIndexOf("/") + 1);
  const colon = last.lastIndexOf(":");
  if (colon >= 0) return GEMINI_OPERATIONS[last.slice(colon + 1)] ?? ""; // models/{model}:generateContent
  for (const [suffix, operation] of OPERATIONS) if (path.endsWith(suffix)) return operation;
  return "";
}

/** The first character of s that is not JSON white space. */
function firstChar(s: string): string {
  for (let i = 0; i < s.length; i++) {
    const c = s[i]!;
    if (c !== " " && c !== "\n" && c !== "\r" && c !== "\t") return c;
  }
  return "";
}
