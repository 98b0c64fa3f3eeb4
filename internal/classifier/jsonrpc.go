package classifier

import "bytes"

// JSON-RPC 2.0 (MCP's transport) reports a failure as an error object with a
// numeric code: -32700 parse error, -32600 invalid request, -32601 method
// not found, -32602 invalid params, -32603 internal error, and
// -32000 to -32099 for the server's own errors. MCP's SDKs print them into
// messages ("MCP error -32602: Tool x not found"). Each code gives two kinds:
// its class (KindJSONRPC...) and the exact number ("jsonrpc:-32001"), so
// that a rule can name an SDK's own code in the server range.

// JSON-RPC error kinds, by class of code.
const (
	KindJSONRPCParseError     = "jsonrpc_parse_error"
	KindJSONRPCInvalidRequest = "jsonrpc_invalid_request"
	KindJSONRPCMethodNotFound = "jsonrpc_method_not_found"
	KindJSONRPCInvalidParams  = "jsonrpc_invalid_params"
	KindJSONRPCInternalError  = "jsonrpc_internal_error"
	KindJSONRPCServerError    = "jsonrpc_server_error"
)

// KindToolError is the kind of an MCP tool result with "isError": true:
// the tool ran and reported a failure; its content says which.
const KindToolError = "tool_error"

// jsonrpcKind returns the class kind of a JSON-RPC error code, or "".
func jsonrpcKind(code int) string {
	switch {
	case code == -32700:
		return KindJSONRPCParseError
	case code == -32600:
		return KindJSONRPCInvalidRequest
	case code == -32601:
		return KindJSONRPCMethodNotFound
	case code == -32602:
		return KindJSONRPCInvalidParams
	case code == -32603:
		return KindJSONRPCInternalError
	case code >= -32099 && code <= -32000:
		return KindJSONRPCServerError
	}
	return ""
}

// jsonrpcCode reads "-32xxx" at the start of s (a JSON number or the text
// after "error "), not followed by another digit.
func jsonrpcCode(s []byte) (int, bool) {
	if len(s) < 6 || s[0] != '-' || s[1] != '3' || s[2] != '2' {
		return 0, false
	}
	n := 0
	for i := 1; i < 6; i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	if len(s) > 6 && s[6] >= '0' && s[6] <= '9' {
		return 0, false
	}
	return -n, jsonrpcKind(-n) != ""
}

// addJSONRPC marks the kinds of a JSON-RPC error code.
func (c *Classifier) addJSONRPC(fx *facts, code int) {
	c.addKind(fx, jsonrpcKind(code), false)
	var num [16]byte
	b := append(num[:0], "jsonrpc:"...)
	b = appendInt(b, code)
	c.addKind(fx, string(b), false)
}

// jsonrpcPrefixes are what a JSON-RPC code follows in a message.
var jsonrpcPrefixes = [][]byte{[]byte("error "), []byte("code: "), []byte("code="), []byte("error: "), []byte("code\":"), []byte("code\": ")}

// jsonrpcFromText returns the first JSON-RPC error code lower-case text
// states after one of jsonrpcPrefixes.
func jsonrpcFromText(text []byte) (int, bool) {
	rest := text
	for {
		i := bytes.Index(rest, []byte("-32"))
		if i < 0 {
			return 0, false
		}
		before := rest[:i]
		for _, p := range jsonrpcPrefixes {
			if bytes.HasSuffix(before, p) {
				if code, ok := jsonrpcCode(rest[i:]); ok {
					return code, true
				}
			}
		}
		rest = rest[i+3:]
	}
}

func appendInt(b []byte, n int) []byte {
	if n < 0 {
		b = append(b, '-')
		n = -n
	}
	var d [20]byte
	i := len(d)
	for {
		i--
		d[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			break
		}
	}
	return append(b, d[i:]...)
}
