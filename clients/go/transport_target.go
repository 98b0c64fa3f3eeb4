package policyd

import (
	"bytes"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
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
// transport reads every one.
func jsonModel(body []byte) string {
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' || !json.Valid(body) {
		return ""
	}
	var raw []byte         // the last model's value, when it is a string
	depth, key := 0, false // key: the next string at depth 1 is a key
	for ; i < len(body); i++ {
		switch c := body[i]; c {
		case '{', '[':
			depth++
			key = depth == 1
		case '}', ']':
			depth--
		case ',':
			key = depth == 1
		case '"':
			end := stringEnd(body, i)
			if key && depth == 1 {
				key = false
				if string(body[i:end]) == `"model"` {
					raw = nil
					if v := skipSpace(body, skipSpace(body, end)+1); body[v] == '"' { // past the ':'
						raw = body[v:stringEnd(body, v)]
					}
				}
			}
			i = end - 1
		}
	}
	if raw == nil {
		return ""
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1])
	}
	var m string
	_ = json.Unmarshal(raw, &m)
	return m
}

// stringEnd is the index just past the JSON string that starts at i.
func stringEnd(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
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
