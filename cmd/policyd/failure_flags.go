package main

import (
	"errors"
	"flag"
	"os"
	"strings"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/validate"
)

// fieldFlags names the flag that sets each request field, to point
// validation errors at what the user typed.
var fieldFlags = map[string]string{
	"failure.provider": "provider", "failure.model": "model", "failure.operation": "operation",
	"failure.method": "method", "failure.http_status": "status", "failure.headers": "header",
	"failure.body": "body", "failure.message": "message", "failure.error_name": "error-name",
	"failure.error_code": "error-code", "failure.causes": "cause", "failure.phase": "phase",
	"failure.grpc_code": "grpc-code", "profile": "profile",
	"failure_type": "failure-type", "attempt": "attempt", "elapsed": "elapsed",
	"deadline": "deadline", "safety": "safety",
}

// errorSource is where a validation error's field came from: "--flag" when
// the user set that field with a flag, else source ("flags" or "stdin").
func errorSource(err error, source string, set map[string]bool) string {
	if fe, ok := errors.AsType[*validate.FieldError](err); ok {
		field, _, _ := strings.Cut(fe.Field, "[")
		if name := fieldFlags[field]; set[name] {
			return "--" + name
		}
	}
	return source
}

// failureFlags are the flags that describe a failure, shared by classify
// and next-delay.
type failureFlags struct {
	f              *policydv1.Failure
	body, bodyFile string
	names          map[string]bool // the flags' names
}

// addFailureFlags defines the failure flags on fs, which must have no flags
// yet (every flag defined so far counts as a failure flag).
func addFailureFlags(fs *flag.FlagSet) *failureFlags {
	ff := &failureFlags{f: &policydv1.Failure{}, names: map[string]bool{}}
	f := ff.f
	int32Var(fs, &f.HttpStatus, "status", "HTTP `status`; 0 when there was no HTTP response")
	fs.Func("header", "response header `'name: value'` (repeatable)", func(s string) error {
		name, value, ok := strings.Cut(s, ":")
		if name = strings.TrimSpace(name); !ok || name == "" {
			return errors.New("want 'name: value'")
		}
		if f.Headers == nil {
			f.Headers = map[string]string{}
		}
		value = strings.TrimSpace(value)
		if prev, dup := f.Headers[name]; dup {
			value = prev + ", " + value // repeated HTTP headers combine so
		}
		f.Headers[name] = value
		return nil
	})
	fs.StringVar(&ff.body, "body", "", "raw response `body` (JSON or text); only the first 64 KiB are read")
	fs.StringVar(&ff.bodyFile, "body-file", "", "read the response body from `file`")
	fs.StringVar(&f.Message, "message", "", "the runtime's error `message`")
	fs.StringVar(&f.ErrorName, "error-name", "", "the error's class `name`, e.g. TypeError")
	fs.StringVar(&f.ErrorCode, "error-code", "", "a network, task or stream `code`, e.g. ECONNRESET")
	fs.Func("cause", "a cause chain link `'name:code:message'`, outermost first (repeatable)", func(s string) error {
		parts := strings.SplitN(s, ":", 3)
		parts = append(parts, "", "")
		f.Causes = append(f.Causes, &policydv1.Cause{Name: parts[0], Code: parts[1], Message: parts[2]})
		return nil
	})
	fs.StringVar(&f.Provider, "provider", "", "the `provider`, e.g. openai, anthropic")
	fs.StringVar(&f.Model, "model", "", "the `model`, e.g. gpt-4")
	fs.StringVar(&f.Operation, "operation", "", "what was being done (`operation`), e.g. chat, chat.stream, web_fetch")
	fs.StringVar(&f.Method, "method", "", "the HTTP `method`")
	fs.Func("phase", "`phase` of a streaming call that failed: connect or mid_stream", func(s string) error {
		switch s {
		case "connect":
			f.Phase = policydv1.Phase_PHASE_CONNECT
		case "mid_stream":
			f.Phase = policydv1.Phase_PHASE_MID_STREAM
		default:
			return errors.New("want connect or mid_stream")
		}
		return nil
	})
	int32Var(fs, &f.GrpcCode, "grpc-code", "status `code` (0..16) of a failed upstream gRPC call")
	fs.VisitAll(func(fl *flag.Flag) { ff.names[fl.Name] = true })
	return ff
}

// given returns the flags set on the command line and the name of one
// failure flag among them ("" when none).
func (ff *failureFlags) given(fs *flag.FlagSet) (set map[string]bool, failureFlag string) {
	set = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) {
		set[fl.Name] = true
		if ff.names[fl.Name] {
			failureFlag = fl.Name
		}
	})
	return set, failureFlag
}

// failure returns the failure the flags describe, its body read from
// --body-file when given; cmd names the command in errors.
func (ff *failureFlags) failure(cmd string, set map[string]bool) (*policydv1.Failure, error) {
	body := ff.body
	if ff.bodyFile != "" {
		if set["body"] {
			return nil, usageErrorf("%s: --body and --body-file are exclusive", cmd)
		}
		b, err := os.ReadFile(ff.bodyFile)
		if err != nil {
			return nil, usageErrorf("%s: --body-file: %v", cmd, err)
		}
		body = string(b)
	}
	ff.f.Body = body
	return ff.f, nil
}
