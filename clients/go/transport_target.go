package policyd

import (
	"bytes"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"unicode/utf8"
)

// What a request through the transport calls (docs/clients.md, "The
// transport"): the provider, the model and the operation, read from the
// options, else the request. clients/testdata/transport_hosts.json pins
// the host table and the provider and model rules the three clients share.

// providerHosts maps an API's host to its provider: exact (lower case),
// or with a leading "*." any subdomain of the rest (not the domain itself):
// each Azure OpenAI resource has a host of its own.
var providerHosts = map[string]string{
	"api.openai.com":                    "openai",
	"api.anthropic.com":                 "anthropic",
	"generativelanguage.googleapis.com": "google",
	"*.openai.azure.com":                "azure",
	"api.mistral.ai":                    "mistral",
	"api.groq.com":                      "groq",
	"api.deepseek.com":                  "deepseek",
	"openrouter.ai":                     "openrouter",
}

// unknownProvider is the provider of a request nothing names.
const unknownProvider = "unknown"

// providerOf is the provider of a request to host (without its port) and
// path: the host table, else the path (…/v1/messages… is Anthropic's API,
// …/chat/completions… and …/responses… OpenAI's, as their compatible
// gateways serve them), else "unknown".
func providerOf(host, path string) string {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if p, ok := providerHosts[host]; ok {
		return p
	}
	for h, p := range providerHosts {
		if suffix, ok := strings.CutPrefix(h, "*"); ok && strings.HasSuffix(host, suffix) && len(host) > len(suffix) {
			return p
		}
	}
	var prev string
	for seg := range strings.SplitSeq(path, "/") {
		if seg == "" {
			continue
		}
		switch {
		case prev == "v1" && seg == "messages":
			return "anthropic"
		case prev == "chat" && seg == "completions", seg == "responses":
			return "openai"
		}
		prev = seg
	}
	return unknownProvider
}

// operationPaths maps a model API's path end to the operation policyd
// reads, the longest first: a model operation may be repeated whatever its
// method (docs/clients.md, "Operation safety"). The names are the other
// clients' too.
var operationPaths = []struct{ suffix, operation string }{
	{"/chat/completions", "chat"},
	{"/messages/count_tokens", "messages.count_tokens"},
	{"/completions", "completion"},
	{"/responses", "responses"},
	{"/embeddings", "embeddings"},
	{"/messages", "messages"},
}

// geminiOperations maps a Gemini method (models/{model}:method) to its
// operation.
var geminiOperations = map[string]string{
	"generateContent":       "generate_content",
	"streamGenerateContent": "generate_content",
	"countTokens":           "model.count_tokens",
	"embedContent":          "embed_content",
	"batchEmbedContents":    "embed_content",
}

// operationOf is the operation of a request to path; empty when the path
// is none of the model APIs above, and its method decides whether it may
// be repeated.
func operationOf(path string) string {
	path = strings.TrimRight(path, "/")
	last := path[strings.LastIndexByte(path, '/')+1:]
	if i := strings.LastIndexByte(last, ':'); i >= 0 {
		return geminiOperations[last[i+1:]]
	}
	for _, s := range operationPaths {
		if strings.HasSuffix(path, s.suffix) {
			return s.operation
		}
	}
	return ""
}

// geminiModel is the model of a Gemini-style path, models/{model}:method.
var geminiModel = regexp.MustCompile(`(?:^|/)models/([^/:]+):[^/]+$`)

// modelOf is the model a request names: its JSON body's "model" field
// (body nil: not read, too large or absent), else a Gemini-style path's.
func modelOf(body []byte, path string) string {
	if m := jsonModel(body); m != "" {
		return m
	}
	if m := geminiModel.FindStringSubmatch(path); m != nil {
		return m[1]
	}
	return ""
}

// jsonModel is the top-level string "model" field of a JSON object (the
// last, when the key repeats, as JSON decoders read it); empty when body is
// not JSON, or its model is not a string. It scans the body's top level
// instead of decoding it: a request carries a whole conversation, and the
// transport reads every one. The scan checks the body's structure (strings
// closed, brackets matched, nothing after the object, only JSON's bytes
// between the strings), not each literal's spelling, which a full validator
// would: that check cost more than the rest of the transport's work on a
// success, and a body so malformed is refused by the provider anyway.
func jsonModel(body []byte) string {
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return ""
	}
	var open [32]byte
	stack := open[:0] // the open brackets
	var raw []byte    // the last model's value, when it is a string
	key := false      // the next string at depth 1 is a key
	for ; i < len(body); i++ {
		switch c := body[i]; c {
		case '{', '[':
			stack = append(stack, c)
			key = c == '{' && len(stack) == 1
		case '}', ']':
			if len(stack) == 0 || stack[len(stack)-1] != c-2 { // '{'+2 == '}', '['+2 == ']'
				return ""
			}
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				if skipSpace(body, i+1) != len(body) {
					return ""
				}
				return modelValue(raw)
			}
		case ',':
			key = len(stack) == 1
		case '"':
			end := stringEnd(body, i)
			if end < 0 {
				return ""
			}
			if key && len(stack) == 1 {
				key = false
				colon := skipSpace(body, end)
				if colon >= len(body) || body[colon] != ':' {
					return ""
				}
				if string(body[i:end]) == `"model"` {
					raw = nil
					if v := skipSpace(body, colon+1); v < len(body) && body[v] == '"' {
						if e := stringEnd(body, v); e > 0 {
							raw = body[v:e]
						}
					}
				}
			}
			i = end - 1
		default:
			if !jsonBetween[c] {
				return ""
			}
		}
	}
	return "" // not closed
}

// modelValue is a JSON string's value, raw with its quotes; "" for nil.
func modelValue(raw []byte) string {
	if raw == nil {
		return ""
	}
	if v := raw[1 : len(raw)-1]; bytes.IndexByte(v, '\\') < 0 && utf8.Valid(v) {
		return string(v)
	}
	var m string
	_ = json.Unmarshal(raw, &m)
	return m
}

// jsonBetween holds the bytes JSON allows outside its strings and
// brackets: white space, ':', numbers and the letters of true, false and
// null.
var jsonBetween = func() (t [256]bool) {
	for _, c := range []byte(" \t\r\n:0123456789+-.eEtrufalsn") {
		t[c] = true
	}
	return t
}()

// stringEnd is the index just past the JSON string that starts at i, -1
// when it is not closed. It jumps from quote to quote (bytes.IndexByte)
// rather than reading each byte: a conversation is mostly strings.
func stringEnd(b []byte, i int) int {
	for {
		j := bytes.IndexByte(b[i+1:], '"')
		if j < 0 {
			return -1
		}
		i += 1 + j
		slashes := 0
		for k := i - 1; b[k] == '\\'; k-- {
			slashes++
		}
		if slashes%2 == 0 {
			return i + 1
		}
	}
}

// skipSpace is the index of the first byte at or after i that is not JSON
// white space.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// requestPath is the path the tables read.
func requestPath(req *http.Request) string {
	if req.URL == nil {
		return ""
	}
	return req.URL.Path
}
