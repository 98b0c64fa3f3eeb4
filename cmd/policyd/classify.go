package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/policy"
	"github.com/policyd/policyd/internal/validate"
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

func classify(args []string, stdin io.Reader, stdout io.Writer) error {
	fs := newFlagSet("classify", classifyUsage)
	ff := addFailureFlags(fs)
	var profile string
	fromStdin := fs.Bool("stdin", false, "read a JSON ClassifyRequest from stdin")
	retryFetch := fs.Bool("retry-fetch-errors", false, `retry a generic "fetch failed" error that carries no network code`)
	fs.StringVar(&profile, "profile", "", "the `profile` whose rules apply; empty means default")
	policyFile := fs.String("policy", os.Getenv("POLICYD_POLICY"), "policy `file` whose rules add to the built-in ones (env POLICYD_POLICY)")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	pol, err := policy.Load(*policyFile, os.Getenv)
	if err != nil {
		return usageErrorf("classify: %v", err)
	}
	set, failureFlag := ff.given(fs)

	var req *policydv1.ClassifyRequest
	source := "stdin"
	switch {
	case *fromStdin && failureFlag != "":
		return usageErrorf("classify: --stdin cannot be combined with --%s", failureFlag)
	case *fromStdin || failureFlag == "" && !isTerminal(stdin):
		req = &policydv1.ClassifyRequest{}
		if err := readRequest(stdin, req, "classify"); err != nil {
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
		f, err := ff.failure("classify", set)
		if err != nil {
			return err
		}
		req = &policydv1.ClassifyRequest{Failure: f, Profile: profile}
		if *retryFetch {
			req.Options = &policydv1.ClassifyOptions{RetryFetchErrors: true}
		}
	}

	if err := validate.ClassifyRequest(req); err != nil {
		return usageErrorf("classify: %s: %v", errorSource(err, source, set), err)
	}
	c := pol.Classifier.Classify(req.GetFailure(), req.GetOptions(), req.GetProfile())
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

// readRequest reads a JSON request (protojson: JSON or proto field names)
// from r into req; cmd names the command in errors.
func readRequest(r io.Reader, req proto.Message, cmd string) error {
	name := req.ProtoReflect().Descriptor().Name()
	data, err := io.ReadAll(io.LimitReader(r, maxStdinBytes+1))
	if err != nil {
		return fmt.Errorf("%s: read stdin: %w", cmd, err)
	}
	if len(data) > maxStdinBytes {
		return usageErrorf("%s: stdin: request larger than %d bytes", cmd, maxStdinBytes)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return usageErrorf("%s: stdin: empty, want a JSON %s", cmd, name)
	}
	if err := protojson.Unmarshal(data, req); err != nil {
		return usageErrorf("%s: stdin: not a JSON %s: %v", cmd, name, err)
	}
	return nil
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
