package cases

import (
	"fmt"
	"io"
	"strings"
)

// WriteTable writes the agreement per suite and group as a Markdown table.
func WriteTable(w io.Writer, stats []Stats) {
	fmt.Fprintln(w, "| suite | group | cases | agree | differ on purpose | failing | retryable agrees |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|")
	row := func(s Stats, bold bool) {
		b := ""
		if bold {
			b = "**"
		}
		fmt.Fprintf(w, "| %s%s%s | %s%s%s | %d | %d (%s) | %d | %d | %d/%d (%s) |\n", b, s.Suite, b, b, s.Group, b,
			s.Cases, s.Agree, Percent(s.Agree, s.Cases), s.Documented, s.Failing,
			s.RetryableAgree, s.RetryableCases, Percent(s.RetryableAgree, s.RetryableCases))
	}
	suites := []string{}
	for _, s := range stats {
		if len(suites) == 0 || suites[len(suites)-1] != s.Suite {
			suites = append(suites, s.Suite)
		}
	}
	for _, suite := range suites {
		for _, s := range stats {
			if s.Suite == suite {
				row(s, false)
			}
		}
		row(Total(stats, suite), true)
	}
	if len(suites) > 1 {
		row(Total(stats, ""), true)
	}
}

// WriteSummary writes one line per group, for a terminal.
func WriteSummary(w io.Writer, stats []Stats) {
	for _, s := range append(stats, Total(stats, "")) {
		fmt.Fprintf(w, "agreement: %-8s %-28s %4d cases  %4d agree (%s)  %3d differ on purpose  %3d failing  retryable %d/%d (%s)\n",
			s.Suite, s.Group, s.Cases, s.Agree, Percent(s.Agree, s.Cases), s.Documented, s.Failing,
			s.RetryableAgree, s.RetryableCases, Percent(s.RetryableAgree, s.RetryableCases))
	}
}

// WriteDisagreements writes every documented disagreement as a Markdown
// table: the case, what its source says, what policyd answers and why.
func WriteDisagreements(w io.Writer, outcomes []*Outcome) {
	fmt.Fprintln(w, "| case | source | the source says | policyd answers | why |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, o := range outcomes {
		c := o.Case
		if c.Policyd == nil {
			continue
		}
		fmt.Fprintf(w, "| `%s` | %s | %s | %s | %s |\n", c.ID, cell(c.Source.String()), cell(expectText(c.Expect)),
			cell(expectText(c.Policyd.Expect)), cell(c.Policyd.Why))
	}
}

// expectText renders the keys an expectation sets.
func expectText(e Expect) string {
	var parts []string
	if e.Retryable != nil {
		parts = append(parts, fmt.Sprintf("retryable %v", *e.Retryable))
	}
	if e.Type != "" {
		parts = append(parts, e.Type)
	}
	if e.Action != "" {
		parts = append(parts, e.Action)
	}
	if e.Delay != nil {
		parts = append(parts, "after "+e.Delay.String())
	}
	if e.DelayMin != nil || e.DelayMax != nil {
		lo, hi := "0s", "∞"
		if e.DelayMin != nil {
			lo = e.DelayMin.String()
		}
		if e.DelayMax != nil {
			hi = e.DelayMax.String()
		}
		parts = append(parts, "after "+lo+"–"+hi)
	}
	if e.StopReason != "" {
		parts = append(parts, "("+e.StopReason+")")
	}
	if e.RetryAfter != "" {
		parts = append(parts, "hint "+e.RetryAfter)
	}
	if e.Rule != "" {
		parts = append(parts, "rule "+e.Rule)
	}
	return strings.Join(parts, ", ")
}

func cell(s string) string {
	s = strings.ReplaceAll(s, "|", "\\|")
	return strings.ReplaceAll(s, "\n", " ")
}
