package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/policyd/policyd/internal/policy"
)

const checkPolicyUsage = `Usage: policyd check-policy FILE

Loads the policy file FILE as 'policyd serve --policy FILE' would, with the
POLICYD_MAX_RETRY_* caps in the environment, and prints
"FILE: ok, N profiles (names)". A bad file prints the problem as
"FILE:LINE: field: problem" and exits 1.
`

func checkPolicy(args []string, stdout io.Writer) error {
	fs := newFlagSet("check-policy", checkPolicyUsage)
	if err := parseFlagsArgs(fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageErrorf("check-policy: want one policy FILE, got %d arguments; see 'policyd check-policy --help'", fs.NArg())
	}
	file := fs.Arg(0)
	p, err := policy.Load(file, os.Getenv)
	if err != nil {
		return err // names the file, line and field
	}
	names := p.ProfileNames()
	_, err = fmt.Fprintf(stdout, "%s: ok, %d profiles (%s)\n", file, len(names), strings.Join(names, ", "))
	return err
}
