package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/policyd/policyd/internal/cases"
	"github.com/policyd/policyd/internal/policy"
)

const checkRulesUsage = `Usage: policyd check-rules --cases FILE [--cases FILE...] [--policy FILE] [--agreement]

Replays labelled failure cases against the rules in force — the built-in rules
and profiles, plus the policy file when given, with the POLICYD_MAX_RETRY_*
caps in the environment — through the real classifier and NextDelay. The
case format is conformance/README.md's: each case a failure and what its
source says a correct client does (retryable, type, action, delay...).

Prints each case policyd disagrees with, the rule that matched and what it
answered, then a count; exits 1 when any case disagrees, 0 when all agree.
A FILE may be a directory (its *.yaml files) or a glob.

`

// stringList is a repeatable flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

func checkRules(args []string, stdout io.Writer) error {
	fs := newFlagSet("check-rules", checkRulesUsage)
	var files stringList
	fs.Var(&files, "cases", "a case FILE, directory or glob (repeatable; required)")
	policyFile := fs.String("policy", "", "the policy FILE whose rules and profiles to check (default: the built-ins)")
	agreement := fs.Bool("agreement", false, "also print agreement per suite and group")
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if len(files) == 0 {
		return usageErrorf("check-rules: --cases: give at least one case file; see 'policyd check-rules --help'")
	}
	p, err := policy.Load(*policyFile, os.Getenv)
	if err != nil {
		return err // names the file, line and field
	}
	caseFiles, err := cases.ReadAll(files...)
	if err != nil {
		return err // names the file, line and field
	}
	var outcomes []*cases.Outcome
	failing, documented := 0, 0
	for _, f := range caseFiles {
		for _, c := range f.Cases {
			o := cases.Replay(p, c)
			outcomes = append(outcomes, o)
			switch {
			case o.Pass() && c.Policyd != nil:
				documented++
			case o.Pass():
			default:
				failing++
				printDisagreement(stdout, o)
			}
		}
	}
	if *agreement {
		cases.WriteSummary(stdout, cases.Summarize(outcomes))
	}
	fmt.Fprintf(stdout, "check-rules: %d cases, %d agree, %d differ on purpose, %d disagree\n",
		len(outcomes), len(outcomes)-failing-documented, documented, failing)
	if failing > 0 {
		return fmt.Errorf("check-rules: %d of %d cases disagree", failing, len(outcomes))
	}
	return nil
}

func printDisagreement(w io.Writer, o *cases.Outcome) {
	c := o.Case
	fmt.Fprintf(w, "%s: case %s: policyd answered %s\n", c.File, c.ID, o.Explain())
	for _, m := range o.Mismatches {
		fmt.Fprintf(w, "    %s\n", m)
	}
	if len(o.Mismatches) == 0 && o.Err == nil {
		fmt.Fprintf(w, "    policyd now gives the source's verdict: remove the case's policyd block\n")
	}
}
