package policyd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	policydv1 "github.com/policyd/policyd/clients/go/internal/gen/policyd/v1"
)

// Failure is a failure as policyd sees it: what FailureFromError made of a
// Go error, plus the Call's provider, model, operation and method. Every
// field is optional; the more it carries, the better the classification.
type Failure struct {
	// Provider, e.g. "openai", "anthropic", "web"; case-insensitive.
	Provider string
	// Model, e.g. "gpt-4o".
	Model string
	// KeyID labels the credential (Call.KeyID); never the key itself.
	KeyID string
	// Operation is what was being done: "chat", "chat.stream", "web_fetch", "task", ...
	Operation string
	// Method is the HTTP method, when there was one.
	Method string
	// HTTPStatus is the response status; 0 when there was no HTTP response.
	HTTPStatus int
	// Headers are the response headers, names in lower case, repeated
	// values joined with ", ".
	Headers map[string]string
	// Body is the response body (the first 64 KiB).
	Body string
	// Message is the error's message (err.Error()); empty for a bare
	// *HTTPError, whose body says more.
	Message string
	// ErrorName is the Go type of the most telling error in the chain,
	// e.g. "*url.Error", "syscall.Errno", "context.Canceled".
	ErrorName string
	// ErrorCode is a network or task code, e.g. "ECONNRESET",
	// "ECONNREFUSED", "ETIMEDOUT", "TEST_FAILURE".
	ErrorCode string
	// Causes is the Unwrap chain, outermost first, without pure wrappers
	// (fmt.Errorf's and errors.Join's).
	Causes []Cause
	// Phase is where in a streaming call the failure happened (see StreamError).
	Phase Phase
	// GRPCCode is the status code of a failed upstream gRPC call; codes.OK
	// when there was none.
	GRPCCode codes.Code
}

// Cause is one link of an error's Unwrap chain.
type Cause struct {
	// Name is the link's Go type or sentinel name, e.g. "*net.OpError", "io.EOF".
	Name string
	// Code is the link's network or task code, e.g. "ECONNRESET"; often empty.
	Code string
	// Message is the link's Error().
	Message string
}

// Request limits policyd enforces; the client truncates to them so that a
// huge error never turns into a refused request.
const (
	maxBodyBytes  = 64 << 10
	maxFieldBytes = 8 << 10
	// maxLabelBytes bounds key_id and client_id: labels, not data.
	maxLabelBytes      = 128
	maxHeaders         = 100
	maxHeaderNameBytes = 256
	maxCauses          = 64
)

// FailureFromError maps a Go error to the Failure policyd classifies. It
// walks the whole Unwrap chain (errors.Unwrap and Unwrap() []error) and
// reads, wherever they sit:
//
//   - *HTTPError: HTTP status, headers, body and method;
//   - *url.Error: the method (Get → GET); a transport-level io.EOF inside it
//     (the server closed the connection before answering) reads as
//     ECONNRESET, as Node reports the same event;
//   - syscall.Errno: ECONNRESET, ECONNREFUSED, ECONNABORTED, EPIPE,
//     ETIMEDOUT, EHOSTUNREACH, ENETUNREACH, ENETDOWN by name;
//   - *net.DNSError: ENOTFOUND, ETIMEDOUT or EAI_AGAIN;
//   - any error with Timeout() true (net.Error: dial, read and http.Client timeouts,
//     os.ErrDeadlineExceeded, context.DeadlineExceeded): ETIMEDOUT when
//     nothing more precise was found;
//   - io.ErrUnexpectedEOF: ECONNRESET (the peer cut the response short);
//   - context.Canceled and context.DeadlineExceeded: named, so policyd reads
//     them as a cancellation (never retried) and a timeout;
//   - gRPC status errors: the code, and a RetryInfo detail as the
//     retry-after-ms header;
//   - *CodeError: its code (task codes such as TEST_FAILURE, stream codes
//     such as NO_FINISH_REASON); *StreamError: its phase.
//
// The outermost code wins. FailureFromError returns nil for a nil error.
func FailureFromError(err error) *Failure {
	if err == nil {
		return nil
	}
	f := &Failure{Message: err.Error()}
	var httpErr *HTTPError
	transport := false // inside a *url.Error or *net.OpError: a bare EOF is a dropped connection
	var walk func(e error, depth int)
	walk = func(e error, depth int) {
		if e == nil || depth > 100 || len(f.Causes) >= maxCauses {
			return
		}
		name, code, wrapper := describe(e, transport)
		switch v := e.(type) {
		case *HTTPError:
			if httpErr == nil {
				httpErr = v
			}
		case *url.Error:
			transport = true
			if f.Method == "" {
				f.Method = httpMethod(v.Op)
			}
		case *net.OpError:
			transport = true
		case *StreamError:
			if f.Phase == PhaseUnspecified {
				f.Phase = v.Phase
			}
		}
		if f.GRPCCode == codes.OK {
			if gs, ok := e.(interface{ GRPCStatus() *status.Status }); ok {
				if st := gs.GRPCStatus(); st != nil && st.Code() != codes.OK {
					f.GRPCCode = st.Code()
					if d, ok := retryInfoDelay(st); ok {
						f.setHeader("retry-after-ms", fmt.Sprint(d.Milliseconds()))
					}
				}
			}
		}
		if f.ErrorCode == "" && code != "" {
			f.ErrorCode = code
		}
		if !wrapper {
			if f.ErrorName == "" {
				f.ErrorName = name
			}
			f.Causes = append(f.Causes, Cause{Name: name, Code: code, Message: e.Error()})
		}
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			for _, inner := range u.Unwrap() {
				walk(inner, depth+1)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap(), depth+1)
		}
	}
	walk(err, 0)

	if f.ErrorCode == "" {
		// Any error in the chain that says it timed out, net.Error or not
		// (the AWS SDKs' and others' own error types have Timeout() too).
		var te interface{ Timeout() bool }
		if errors.As(err, &te) && te.Timeout() {
			f.ErrorCode = "ETIMEDOUT"
		}
	}
	if httpErr != nil {
		f.HTTPStatus = httpErr.status()
		for k, v := range httpErr.headers() {
			f.setHeader(k, v)
		}
		f.Body = string(httpErr.Body)
		if m := httpErr.method(); m != "" {
			f.Method = m
		}
		if err == error(httpErr) {
			// A bare HTTP error: the body says more than "POST …: 401".
			f.Message = ""
		}
		if f.ErrorCode == "" {
			f.ErrorCode = bodyErrorCode(httpErr.Body)
		}
	}
	return f
}

// bodyErrorCode is the provider's machine code in a JSON error body, as the
// SDKs read it: error.code ("insufficient_quota", "rate_limit_exceeded"),
// else error.status ("RESOURCE_EXHAUSTED"); "" when there is none. The
// journal keeps it, so post-mortems tell an exhausted quota from a rate
// limit; every client reads the same two fields (error_mapping.json).
func bodyErrorCode(body []byte) string {
	var b struct {
		Error struct {
			Code   any `json:"code"`
			Status any `json:"status"`
		} `json:"error"`
	}
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' || json.Unmarshal(body, &b) != nil {
		return ""
	}
	for _, v := range []any{b.Error.Code, b.Error.Status} {
		if s, ok := v.(string); ok && s != "" && len(s) <= 128 && !strings.ContainsAny(s, " \t\n\r") {
			return s
		}
	}
	return ""
}

func (f *Failure) setHeader(name, value string) {
	if f.Headers == nil {
		f.Headers = make(map[string]string)
	}
	f.Headers[strings.ToLower(name)] = value
}

// describe names one link of a chain, gives its code when it carries one,
// and says whether it is a pure wrapper whose message its parent already has.
func describe(e error, transport bool) (name, code string, wrapper bool) {
	switch e {
	case context.Canceled:
		return "context.Canceled", "", false
	case context.DeadlineExceeded:
		return "context.DeadlineExceeded", "", false
	case io.EOF:
		if transport {
			return "io.EOF", "ECONNRESET", false
		}
		return "io.EOF", "", false
	case io.ErrUnexpectedEOF:
		return "io.ErrUnexpectedEOF", "ECONNRESET", false
	case os.ErrDeadlineExceeded:
		return "os.ErrDeadlineExceeded", "ETIMEDOUT", false
	case net.ErrClosed:
		return "net.ErrClosed", "", false
	}
	name = fmt.Sprintf("%T", e)
	switch v := e.(type) {
	case syscall.Errno:
		return "syscall.Errno", errnoNames[v], false
	case *net.DNSError:
		switch {
		case v.IsNotFound:
			return name, "ENOTFOUND", false
		case v.IsTimeout:
			return name, "ETIMEDOUT", false
		}
		return name, "EAI_AGAIN", false
	case *CodeError:
		return name, v.Code, false
	case *StreamError:
		return name, "", true
	}
	switch name {
	case "*fmt.wrapError", "*fmt.wrapErrors", "*errors.joinError":
		return name, "", true
	}
	return name, "", false
}

// errnoNames are the network errnos policyd knows by name.
var errnoNames = map[syscall.Errno]string{
	syscall.ECONNRESET:   "ECONNRESET",
	syscall.ECONNREFUSED: "ECONNREFUSED",
	syscall.ECONNABORTED: "ECONNABORTED",
	syscall.EPIPE:        "EPIPE",
	syscall.ETIMEDOUT:    "ETIMEDOUT",
	syscall.EHOSTUNREACH: "EHOSTUNREACH",
	syscall.ENETUNREACH:  "ENETUNREACH",
	syscall.ENETDOWN:     "ENETDOWN",
}

// httpMethod turns a *url.Error's Op ("Get", "Post") into a method.
func httpMethod(op string) string {
	switch m := strings.ToUpper(op); m {
	case "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE":
		return m
	}
	return ""
}

// retryInfoTypeURL is google.rpc.RetryInfo's Any type URL. The detail is
// decoded by hand (field 1, a google.protobuf.Duration) so that the client
// does not need the errdetails package.
const retryInfoTypeURL = "type.googleapis.com/google.rpc.RetryInfo"

// retryInfoDelay is a status's RetryInfo.retry_delay, when it carries one.
func retryInfoDelay(st *status.Status) (time.Duration, bool) {
	for _, a := range st.Proto().GetDetails() {
		if a.GetTypeUrl() != retryInfoTypeURL {
			continue
		}
		b := a.GetValue()
		for len(b) > 0 {
			num, typ, n := protowire.ConsumeTag(b)
			if n < 0 {
				return 0, false
			}
			b = b[n:]
			if num == 1 && typ == protowire.BytesType {
				v, n := protowire.ConsumeBytes(b)
				if n < 0 {
					return 0, false
				}
				var d durationpb.Duration
				if proto.Unmarshal(v, &d) != nil || d.CheckValid() != nil || d.AsDuration() < 0 {
					return 0, false
				}
				return d.AsDuration(), true
			}
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return 0, false
			}
			b = b[n:]
		}
	}
	return 0, false
}

// proto renders f within policyd's request limits: strings valid UTF-8 and
// truncated, at most 100 headers and 64 causes.
func (f *Failure) proto() *policydv1.Failure {
	if f == nil {
		return nil
	}
	pf := &policydv1.Failure{
		Provider:   clip(f.Provider, maxFieldBytes),
		Model:      clip(f.Model, maxFieldBytes),
		KeyId:      clip(f.KeyID, maxLabelBytes),
		Operation:  clip(f.Operation, maxFieldBytes),
		Method:     clip(f.Method, maxFieldBytes),
		Body:       clip(f.Body, maxBodyBytes),
		Message:    clip(f.Message, maxFieldBytes),
		ErrorName:  clip(f.ErrorName, maxFieldBytes),
		ErrorCode:  clip(f.ErrorCode, maxFieldBytes),
		Phase:      policydv1.Phase(f.Phase),
		GrpcCode:   int32(f.GRPCCode),
		HttpStatus: int32(f.HTTPStatus),
	}
	if pf.HttpStatus != 0 && (pf.HttpStatus < 100 || pf.HttpStatus > 999) {
		pf.HttpStatus = 0
	}
	if pf.GrpcCode < 0 || pf.GrpcCode > 16 {
		pf.GrpcCode = int32(codes.Unknown)
	}
	if len(f.Headers) > 0 {
		names := make([]string, 0, len(f.Headers))
		for k := range f.Headers {
			if k != "" && len(k) <= maxHeaderNameBytes {
				names = append(names, k)
			}
		}
		// Keep the delay hints first when there are too many headers.
		sort.Slice(names, func(i, j int) bool {
			hi, hj := isHintHeader(names[i]), isHintHeader(names[j])
			if hi != hj {
				return hi
			}
			return names[i] < names[j]
		})
		if len(names) > maxHeaders {
			names = names[:maxHeaders]
		}
		pf.Headers = make(map[string]string, len(names))
		for _, k := range names {
			pf.Headers[clip(strings.ToLower(k), maxHeaderNameBytes)] = clip(f.Headers[k], maxFieldBytes)
		}
	}
	for i, c := range f.Causes {
		if i >= maxCauses {
			break
		}
		pf.Causes = append(pf.Causes, &policydv1.Cause{
			Name: clip(c.Name, maxFieldBytes), Code: clip(c.Code, maxFieldBytes), Message: clip(c.Message, maxFieldBytes),
		})
	}
	return pf
}

func isHintHeader(name string) bool {
	return strings.HasPrefix(name, "retry-after") || strings.HasPrefix(name, "x-ratelimit") ||
		name == "x-should-retry" || name == "x-amz-retry-after" || name == "grpc-retry-pushback-ms"
}

// clip makes s valid UTF-8 and at most n bytes, cutting at a rune boundary.
func clip(s string, n int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
