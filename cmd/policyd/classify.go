package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/classifier"
	"github.com/policyd/policyd/internal/server"
)

// maxStdinBytes bounds a JSON request on stdin; it matches gRPC's default
// 4 MiB message limit, so classify accepts what the server would.
const maxStdinBytes = 4 << 20

const classifyUsage = `Usage: policyd classify [flags]
       policyd classify [--stdin] < request.json

Classifies one failure offline, without a server, and prints the
ClassifyResponse as JSON (what grpcurl would show for the Classify RPC).

The failure comes from the flags below or, with --stdin or when no failure
flag is given and stdin is not a terminal, from a JSON ClassifyRequest on
stdin, e.g.
  {"failure":{"httpStatus":429,"headers":{"retry-after":"7"}},"profile":"default"}
--profile and --retry-fetch-errors override the JSON's. The request is
validated as the server validates it; bad input exits 2.
`

// fieldFlags names the flag that sets each request field, to point errors
// at what the user typed.
var fieldFlags = map[string]string{
	"failure.provider": "provider", "failure.model": "model", "failure.operation": "operation",
	"failure.method": "method", "failure.http_status": "status", "failure.headers": "header",
	"failure.body": "body", "failure.message": "message", "failure.error_name": "error-name",
	"failure.error_code": "error-code", "failure.causes": "cause", "failure.phase": "phase",
	"failure.grpc_code": "grpc-code", "profile": "profile",
}

func classify(args []string, stdin io.Reader, stdout io.Writer) error {
	fs := newFlagSet("classify", classifyUsage)
	f := &policydv1.Failure{}
	var body, bodyFile, profile string
	fromStdin := fs.Bool("stdin", false, "read a JSON ClassifyRequest from stdin")
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
	fs.StringVar(&body, "body", "", "raw response `body` (JSON or text); only the first 64 KiB are read")
	fs.StringVar(&bodyFile, "body-file", "", "read the response body from `file`")
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
	retryFetch := fs.Bool("retry-fetch-errors", false, `retry a generic "fetch failed" error that carries no network code`)
	fs.StringVar(&profile, "profile", "", "the `profile` whose rules apply; empty means default")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}

	set := map[string]bool{}
	var failureFlag string // one failure flag given, for messages
	fs.Visit(func(fl *flag.Flag) {
		set[fl.Name] = true
		if fl.Name != "stdin" && fl.Name != "profile" && fl.Name != "retry-fetch-errors" {
			failureFlag = fl.Name
		}
	})

	var req *policydv1.ClassifyRequest
	source := "stdin"
	switch {
	case *fromStdin && failureFlag != "":
		return usageErrorf("classify: --stdin cannot be combined with --%s", failureFlag)
	case *fromStdin || failureFlag == "" && !isTerminal(stdin):
		var err error
		if req, err = readRequest(stdin); err != nil {
			return err
		}
		if set["profile"] {
			req.Profile = profile
		}
		if set["retry-fetch-errors"] {
			req.Options = &policydv1.ClassifyOptions{RetryFetchErrors: *retryFetch}
		}
	case failureFlag == "":
		return usageErrorf("classify: no failure given: pass failure flags or a JSON ClassifyRequest on stdin; see 'policyd classify --help'")
	default:
		source = "flags"
		if bodyFile != "" {
			if set["body"] {
				return usageErrorf("classify: --body and --body-file are exclusive")
			}
			b, err := os.ReadFile(bodyFile)
			if err != nil {
				return usageErrorf("classify: --body-file: %v", err)
			}
			body = string(b)
		}
		f.Body = body
		req = &policydv1.ClassifyRequest{Failure: f, Profile: profile}
		if *retryFetch {
			req.Options = &policydv1.ClassifyOptions{RetryFetchErrors: true}
		}
	}

	if err := server.ValidateClassifyRequest(req); err != nil {
		where := source
		if fe, ok := errors.AsType[*server.FieldError](err); ok {
			field, _, _ := strings.Cut(fe.Field, "[")
			if name := fieldFlags[field]; set[name] {
				where = "--" + name
			}
		}
		return usageErrorf("classify: %s: %v", where, err)
	}
	c := classifier.Default().Classify(req.GetFailure(), req.GetOptions(), req.GetProfile())
	return printJSON(stdout, &policydv1.ClassifyResponse{Classification: c})
}

// printJSON writes m as grpcurl shows it: protojson field names, indented by
// two spaces. protojson varies its white space on purpose, so the output is
// re-indented with encoding/json to stay byte-stable for scripts and docs.
func printJSON(w io.Writer, m proto.Message) error {
	raw, err := protojson.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, raw, "", "  "); err != nil {
		return fmt.Errorf("indent JSON: %w", err)
	}
	out.WriteByte('\n')
	_, err = w.Write(out.Bytes())
	return err
}

// readRequest reads a JSON ClassifyRequest (protojson: JSON or proto field
// names) from r.
func readRequest(r io.Reader) (*policydv1.ClassifyRequest, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxStdinBytes+1))
	if err != nil {
		return nil, fmt.Errorf("classify: read stdin: %w", err)
	}
	if len(data) > maxStdinBytes {
		return nil, usageErrorf("classify: stdin: request larger than %d bytes", maxStdinBytes)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, usageErrorf("classify: stdin: empty, want a JSON ClassifyRequest")
	}
	req := &policydv1.ClassifyRequest{}
	if err := protojson.Unmarshal(data, req); err != nil {
		return nil, usageErrorf("classify: stdin: not a JSON ClassifyRequest: %v", err)
	}
	return req, nil
}

// isTerminal reports whether r is a terminal (a character device, so
// /dev/null counts too: neither holds a request).
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
