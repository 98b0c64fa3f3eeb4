package policyd

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"os"
	"strings"
	"testing"
)

// clients/testdata/transport_hosts.json, which the Python and TypeScript
// transports read too: the client's host table is the file's, and a
// request without options calls the provider and model the file says.
func TestTransportHostsVectors(t *testing.T) {
	b, err := os.ReadFile("../testdata/transport_hosts.json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Hosts map[string]string `json:"hosts"`
		Cases []struct {
			ID       string `json:"id"`
			URL      string `json:"url"`
			Body     string `json:"body"`
			Provider string `json:"provider"`
			Model    string `json:"model"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Cases) == 0 {
		t.Fatal("no cases")
	}
	if !maps.Equal(providerHosts, v.Hosts) {
		t.Errorf("providerHosts = %v, want the file's %v", providerHosts, v.Hosts)
	}
	for _, tc := range v.Cases {
		t.Run(tc.ID, func(t *testing.T) {
			call := transportCall(t, &transport{}, tc.URL, tc.Body)
			if call.Provider != tc.Provider || call.Model != tc.Model {
				t.Errorf("provider %q model %q, want %q %q", call.Provider, call.Model, tc.Provider, tc.Model)
			}
		})
	}
}

// transportCall is the Call tr makes of a POST of body to url.
func transportCall(t *testing.T, tr *transport, url, body string) Call {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(http.MethodPost, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := readRequestBody(req)
	if err != nil {
		t.Fatal(err)
	}
	defer rb.release()
	return tr.call(req, rb, 0)
}

// FuzzJSONModel: jsonModel never panics, and on valid JSON it reads what
// a JSON decoder reads: the top level's last "model", when a string.
func FuzzJSONModel(f *testing.F) {
	for _, s := range []string{`{"model":"gpt-4o"}`, `{"messages":[{"model":"x"}],"model":"a\\"b"}`, `{"model":1}`, `{"model"`, `[]`, `{"a":"\\\\"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got := jsonModel(body)
		var top map[string]json.RawMessage
		if !json.Valid(body) || json.Unmarshal(body, &top) != nil {
			return
		}
		var want string
		if raw, ok := top["model"]; ok {
			_ = json.Unmarshal(raw, &want)
		}
		if got != want {
			t.Errorf("jsonModel(%q) = %q, a decoder reads %q", body, got, want)
		}
	})
}

// The model is read from a body's top level only, and not from one over
// 8 MiB; the options win over the request.
func TestTransportModel(t *testing.T) {
	const url = "https://api.openai.com/v1/chat/completions"
	tests := []struct{ name, body, want string }{
		{"top level after nested ones", `{"messages":[{"role":"user","model":"no"}],"metadata":{"model":"no"},"model":"gpt-4o"}`, "gpt-4o"},
		{"a key inside a string", `{"note":"\"model\":\"no\"","model":"gpt-4o"}`, "gpt-4o"},
		{"escaped, with white space", " \n{ \"model\" : \"gpt\\u002d4o\" }", "gpt-4o"},
		{"null", `{"model":null}`, ""},
		{"the last of a repeated key", `{"model":"gpt-4o-mini","model":"gpt-4o"}`, "gpt-4o"},
		{"the last, not a string", `{"model":"gpt-4o","model":1}`, ""},
		{"truncated", `{"model":"gpt-4o"`, ""},
		{"truncated in a string", `{"model":"gpt-4o","messages":[{"content":"hi \\"`, ""},
		{"an escaped quote ends no string", `{"note":"a \\\"model\\\": b","model":"gpt-4o"}`, "gpt-4o"},
		{"brackets crossed", `{"messages":[{"role":"user"]},"model":"gpt-4o"}`, ""},
		{"text after the object", `{"model":"gpt-4o"} {"model":"no"}`, ""},
		{"not JSON between strings", `{"model":"gpt-4o", x}`, ""},
		{"a key without its colon", `{"model" "gpt-4o"}`, ""},
		{"too large to read", `{"model":"gpt-4o"}` + strings.Repeat(" ", maxInspectedBody), ""},
	}
	for _, tt := range tests {
		if got := transportCall(t, &transport{}, url, tt.body).Model; got != tt.want {
			t.Errorf("%s: model %q, want %q", tt.name, got, tt.want)
		}
	}
	opts := &transport{opts: TransportOptions{Provider: "azure", Model: "prod-4o", Operation: "chat.stream"}}
	if call := transportCall(t, opts, url, `{"model":"gpt-4o"}`); call.Provider != "azure" || call.Model != "prod-4o" || call.Operation != "chat.stream" {
		t.Errorf("with options: %+v, want the options'", call)
	}
}

// The operation a request runs as decides whether policyd may repeat it: a
// model API's path is a model operation (safe whatever the method);
// another path leaves it to the method.
func TestTransportOperation(t *testing.T) {
	tests := []struct{ path, want string }{
		{"/v1/chat/completions", "chat"},
		{"/v1/messages", "messages"},
		{"/v1/messages/count_tokens", "messages.count_tokens"},
		{"/v1/responses/", "responses"},
		{"/v1/completions", "completion"},
		{"/v1/embeddings", "embeddings"},
		{"/v1beta/models/gemini-2.5-flash:generateContent", "generate_content"},
		{"/v1beta/models/gemini-2.5-flash:streamGenerateContent", "generate_content"},
		{"/v1beta/models/gemini-2.5-flash:countTokens", "model.count_tokens"},
		{"/v1beta/models/text-embedding-004:embedContent", "embed_content"},
		{"/v1/files", ""},
		{"/v1/messages/batches", ""},
	}
	for _, tt := range tests {
		if got := operationOf(tt.path); got != tt.want {
			t.Errorf("operationOf(%q) = %q, want %q", tt.path, got, tt.want)
		}
	}
	if s := deriveSafety(operationOf("/v1/files"), http.MethodPost); s != SafetyIrreversible {
		t.Errorf("a POST to /v1/files is %v, want irreversible", s)
	}
	if s := deriveSafety(operationOf("/v1/chat/completions"), http.MethodPost); s != SafetySafe {
		t.Errorf("a POST to /v1/chat/completions is %v, want safe", s)
	}
}
