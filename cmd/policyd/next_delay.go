package main

import (
	"errors"
	"io"
	"os"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/enums"
	"github.com/policyd/policyd/internal/policy"
	"github.com/policyd/policyd/internal/strategy"
	"github.com/policyd/policyd/internal/validate"
)

const nextDelayUsage = `Usage: policyd next-delay [flags]
       policyd next-delay [--stdin] < request.json

Answers what to do after a failed attempt — retry after a delay, stop or
fall back — offline, without a server, and prints the NextDelayResponse as
JSON (what grpcurl would show for the NextDelay RPC). The policy is the
built-in one, plus the --policy file, under the POLICYD_MAX_RETRY_* caps in
the environment; jitter is random.

The failure comes from the failure flags below, or --failure-type alone,
or, with --stdin or when neither is given and stdin is not a terminal, from
a JSON NextDelayRequest on stdin, e.g.
  {"failure":{"httpStatus":429,"headers":{"retry-after":"7"}},"attempt":1}
The other flags, when given, override the JSON's fields. The request is
validated as the server validates it; bad input exits 2.
`

func nextDelay(args []string, stdin io.Reader, stdout io.Writer) error {
	fs := newFlagSet("next-delay", nextDelayUsage)
	ff := addFailureFlags(fs)
	r := &policydv1.NextDelayRequest{Attempt: 1} // the request flags' values
	opts := &policydv1.ClassifyOptions{}
	fromStdin := fs.Bool("stdin", false, "read a JSON NextDelayRequest from stdin")
	int32Var(fs, &r.Attempt, "attempt", "how many attempts were made, the failed one included (`n`, default 1)")
	fs.StringVar(&r.Profile, "profile", "", "the `profile`; empty means default")
	fs.Func("failure-type", "an already known failure `type`, e.g. RATE_LIMIT, instead of failure flags", func(s string) error {
		v, ok := enums.Parse[policydv1.FailureType](s)
		if !ok {
			return errors.New("want a failure type, e.g. RATE_LIMIT or OVERLOADED")
		}
		r.FailureType = v
		return nil
	})
	fs.Func("elapsed", "time since the first attempt (`duration`, e.g. 90s)", func(s string) error {
		d, err := time.ParseDuration(s)
		if err != nil {
			return errors.New("want a duration, e.g. 90s or 2m")
		}
		r.Elapsed = durationpb.New(d)
		return nil
	})
	fs.Func("deadline", "the caller's deadline (RFC 3339 `time`, e.g. 2026-01-02T15:04:05Z)", func(s string) error {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return errors.New("want an RFC 3339 time, e.g. 2026-01-02T15:04:05Z")
		}
		r.Deadline = timestamppb.New(t)
		return nil
	})
	fs.Func("safety", "whether the operation may be repeated (`safety`): safe, conditional or irreversible; derived when not given", func(s string) error {
		v, ok := enums.Parse[policydv1.OperationSafety](s)
		if !ok {
			return errors.New("want safe, conditional or irreversible")
		}
		r.Safety = v
		return nil
	})
	fs.BoolVar(&opts.RetryFetchErrors, "retry-fetch-errors", false,
		`retry a generic "fetch failed" error and, under agent_cli, mid-stream network failures`)
	continueFlag := fs.Bool("continue-on-failed-api-call", true, "continue an invalid stream once with the continuation prompt")
	policyFile := fs.String("policy", os.Getenv("POLICYD_POLICY"), "policy `file` adding to the built-in profiles and rules (env POLICYD_POLICY)")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	set, failureFlag := ff.given(fs)

	p, err := policy.Load(*policyFile, os.Getenv)
	if err != nil {
		return usageErrorf("next-delay: %v", err)
	}
	req := &policydv1.NextDelayRequest{}
	source := "stdin"
	switch {
	case *fromStdin && (failureFlag != "" || set["failure-type"]):
		return usageErrorf("next-delay: --stdin cannot be combined with failure flags or --failure-type")
	case *fromStdin || failureFlag == "" && !set["failure-type"] && !isTerminal(stdin):
		if err := readRequest(stdin, req, "next-delay"); err != nil {
			return err
		}
	case failureFlag == "" && !set["failure-type"]:
		return usageErrorf("next-delay: no failure given: pass failure flags, --failure-type or a JSON NextDelayRequest on stdin; " +
			"see 'policyd next-delay --help'")
	default:
		source = "flags"
		if failureFlag != "" {
			if req.Failure, err = ff.failure("next-delay", set); err != nil {
				return err
			}
		}
		req.Attempt = r.Attempt // the flag's default applies
	}
	overrideRequest(req, r, opts, set, *continueFlag)

	if err := validate.NextDelayRequest(req, p); err != nil {
		return usageErrorf("next-delay: %s: %v", errorSource(err, source, set), err)
	}
	d := p.NextDelay(req, time.Now(), strategy.SystemRand{})
	return printJSON(stdout, &policydv1.NextDelayResponse{Decision: d})
}

// overrideRequest sets the fields of req whose flags were given (set) to the
// flags' values in r, opts and continueOn.
func overrideRequest(req, r *policydv1.NextDelayRequest, opts *policydv1.ClassifyOptions, set map[string]bool, continueOn bool) {
	if set["attempt"] {
		req.Attempt = r.Attempt
	}
	if set["profile"] {
		req.Profile = r.Profile
	}
	if set["failure-type"] {
		req.FailureType = r.FailureType
	}
	if set["elapsed"] {
		req.Elapsed = r.Elapsed
	}
	if set["deadline"] {
		req.Deadline = r.Deadline
	}
	if set["safety"] {
		req.Safety = r.Safety
	}
	if set["retry-fetch-errors"] || set["continue-on-failed-api-call"] {
		if req.Options == nil {
			req.Options = &policydv1.ClassifyOptions{}
		}
		if set["retry-fetch-errors"] {
			req.Options.RetryFetchErrors = opts.RetryFetchErrors
		}
		if set["continue-on-failed-api-call"] {
			req.Options.ContinueOnFailedApiCall = &continueOn
		}
	}
}
