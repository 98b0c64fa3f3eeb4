package classifier

import (
	"bytes"
	"strings"
)

// A failure of an upstream gRPC call often reaches policyd as text only:
// grpc-js prints "14 UNAVAILABLE: No connection established", grpc-go
// "rpc error: code = Unavailable desc = ...", grpcio
// "status = StatusCode.UNAVAILABLE", grpc-java "StatusRuntimeException:
// UNAVAILABLE: io exception", and wrappers "Status: INVALID_ARGUMENT". When
// grpc_code is 0, rules see the code such a text states. The names are
// common words ("internal", "aborted"), so only these shapes count.

// grpcNames are the gRPC status names, lower case, indexed by code.
var grpcNames = [...]string{
	"ok", "cancelled", "unknown", "invalid_argument", "deadline_exceeded", "not_found", "already_exists",
	"permission_denied", "resource_exhausted", "failed_precondition", "aborted", "out_of_range",
	"unimplemented", "internal", "unavailable", "data_loss", "unauthenticated",
}

// grpcCamelNames are grpc-go's spellings (codes.Code.String), lower case.
var grpcCamelNames = [...]string{
	"ok", "canceled", "unknown", "invalidargument", "deadlineexceeded", "notfound", "alreadyexists",
	"permissiondenied", "resourceexhausted", "failedprecondition", "aborted", "outofrange",
	"unimplemented", "internal", "unavailable", "dataloss", "unauthenticated",
}

// grpcNamePrefixes are what a bare status name follows, with the byte pairs
// a text must hold for a search to be worth it.
var grpcNamePrefixes = func() []substring {
	var out []substring
	for _, p := range []string{"statuscode.", "status: ", "status=", "grpc-status: ",
		"statusruntimeexception: ", "statusexception: ", "rpcexception: "} {
		out = append(out, newSubstring(p))
	}
	return out
}()

var grpcGoPrefix = newSubstring("code = ")

// grpcFromText returns the gRPC code lower-case text states, or 0; bigrams
// describe text, and digits says whether it holds a digit.
func grpcFromText(text []byte, bigrams *bigramSet, digits bool) int32 {
	if grpcGoPrefix.maybeIn(bigrams) {
		if i := bytes.Index(text, grpcGoPrefix.text); i >= 0 {
			if c := grpcNameAt(text[i+len(grpcGoPrefix.text):], grpcCamelNames[:]); c > 0 {
				return c
			}
		}
	}
	for i := range grpcNamePrefixes {
		p := &grpcNamePrefixes[i]
		if !p.maybeIn(bigrams) {
			continue
		}
		rest := text
		for {
			j := bytes.Index(rest, p.text)
			if j < 0 {
				break
			}
			rest = rest[j+len(p.text):]
			if c := grpcNameAt(rest, grpcNames[:]); c > 0 {
				return c
			}
		}
	}
	if !digits || bytes.IndexByte(text, ':') < 0 {
		return 0
	}
	return grpcNumberedName(text)
}

// grpcNumberedName reads grpc-js's "<code> <NAME>:", where the number and
// the name must agree ("14 unavailable:").
func grpcNumberedName(text []byte) int32 {
	for i := 0; i < len(text); i++ {
		c := text[i]
		if c < '0' || c > '9' || (i > 0 && text[i-1] >= '0' && text[i-1] <= '9') {
			continue
		}
		n, j := int32(c-'0'), i+1
		if j < len(text) && text[j] >= '0' && text[j] <= '9' {
			n = n*10 + int32(text[j]-'0')
			j++
		}
		if n < 1 || int(n) >= len(grpcNames) || j >= len(text) || text[j] != ' ' {
			continue
		}
		name := grpcNames[n]
		rest := text[j+1:]
		if len(rest) > len(name) && string(rest[:len(name)]) == name && rest[len(name)] == ':' {
			return n
		}
	}
	return 0
}

// grpcNameAt returns the code whose name starts b and is not followed by a
// letter or '_', or 0.
func grpcNameAt(b []byte, names []string) int32 {
	for code := len(names) - 1; code >= 1; code-- {
		name := names[code]
		if len(b) < len(name) || string(b[:len(name)]) != name {
			continue
		}
		if len(b) > len(name) {
			if c := b[len(name)]; c == '_' || (c >= 'a' && c <= 'z') {
				continue
			}
		}
		return int32(code)
	}
	return 0
}

// grpcLeadingName reads grpc-java's Status text, "DEADLINE_EXCEEDED: deadline
// exceeded after 9.9s", at the start of a message (lower-case text): a
// status name and a colon. A two-word name (with '_') is a gRPC status
// wherever it starts a message; a one-word name ("internal:",
// "unavailable:") only when the error's own name is gRPC's
// (StatusRuntimeException, *status.Error, grpc.RpcError).
func grpcLeadingName(text []byte, errorName string) int32 {
	end := bytes.IndexByte(text, ':')
	if end < 4 || end > len("failed_precondition") {
		return 0
	}
	code := grpcNameAt(text[:end+1], grpcNames[:])
	if code == 0 || len(grpcNames[code]) != end {
		return 0
	}
	if bytes.IndexByte(text[:end], '_') >= 0 {
		return code
	}
	lower := strings.ToLower(errorName)
	if strings.Contains(lower, "grpc") || strings.Contains(lower, "status") || strings.Contains(lower, "rpc") {
		return code
	}
	return 0
}
