package policy

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/policyd/policyd/internal/classifier"
)

// StatusRule is a profile's own verdict on HTTP statuses or gRPC codes,
// optionally only from some providers: where good clients differ on a status
// (Google's APIs retry a 409 ABORTED; most clients do not retry a 409; a
// gRPC service config lists the codes its calls retry), a profile says which
// it follows without editing the rules table.
type StatusRule struct {
	// Status lists statuses or ranges ("409", "500-599").
	Status []string `yaml:"status"`
	// GRPCCode lists gRPC codes by name or number ("UNAVAILABLE", "14"), or
	// "*" for every code but OK. A rule matches a failure whose HTTP status
	// is in Status or whose gRPC code is in GRPCCode.
	GRPCCode []string `yaml:"grpc_code"`
	// Provider limits the rule to these providers ("*" globs); empty: any.
	Provider []string `yaml:"provider"`
	// Retryable is the verdict.
	Retryable bool `yaml:"retryable"`
	// Type is the failure type; empty: SERVER_ERROR when retryable, else
	// INVALID_REQUEST.
	Type string `yaml:"type"`
}

// parseStatusRules reads a profile's status_rules list.
func parseStatusRules(node *yaml.Node) ([]StatusRule, error) {
	if node.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("must be a list of {status, grpc_code, provider, retryable, type}")
	}
	var out []StatusRule
	for i, n := range node.Content {
		var r StatusRule
		if err := n.Decode(&r); err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		if len(r.Status) == 0 && len(r.GRPCCode) == 0 {
			return nil, fmt.Errorf("[%d].status: must list at least one status or grpc_code", i)
		}
		r.GRPCCode = expandGRPCCodes(r.GRPCCode)
		if _, ok := retryableField(n); !ok {
			return nil, fmt.Errorf("[%d].retryable: must be set (true or false)", i)
		}
		out = append(out, r)
	}
	return out, nil
}

// retryableField reports whether a rule's mapping sets retryable.
func retryableField(n *yaml.Node) (bool, bool) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "retryable" {
			return n.Content[i+1].Value == "true", true
		}
	}
	return false, false
}

// statusRuleSet turns the profiles' status rules into classification rules
// scoped to their profile, to go in front of every other rule: the
// profile's word on a status is its own choice of convention.
func statusRuleSet(profiles map[string]*parsedProfile) classifier.RuleSet {
	names := make([]string, 0, len(profiles))
	for name, pp := range profiles {
		if len(pp.profile.StatusRules) > 0 {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var rs classifier.RuleSet
	for _, name := range names {
		pp := profiles[name]
		for i, sr := range pp.profile.StatusRules {
			t := sr.Type
			if t == "" {
				t = "INVALID_REQUEST"
				if sr.Retryable {
					t = "SERVER_ERROR"
				}
			}
			recovery := "Do not retry; profile " + name + " does not retry this status."
			verdict := "not retried"
			if sr.Retryable {
				recovery = "Retry with backoff, as profile " + name + " does for this status."
				verdict = "retried"
			}
			who := ""
			if len(sr.Provider) > 0 {
				who = " from " + strings.Join(sr.Provider, ", ")
			}
			var when []classifier.Condition
			what := "HTTP {status}"
			if len(sr.Status) > 0 {
				when = append(when, classifier.Condition{Profile: []string{name}, Status: sr.Status, Provider: sr.Provider})
			}
			if len(sr.GRPCCode) > 0 {
				when = append(when, classifier.Condition{Profile: []string{name}, GRPCCode: sr.GRPCCode, Provider: sr.Provider})
				what = "the gRPC code"
				if len(sr.Status) > 0 {
					what = "the status or gRPC code"
				}
			}
			rs.Rules = append(rs.Rules, classifier.Rule{
				ID:        fmt.Sprintf("profile.%s.status_rules[%d]", name, i),
				When:      when,
				Type:      t,
				Retryable: sr.Retryable,
				Reason:    what + who + " is " + verdict + " under profile " + name + "'s status_rules",
				Recovery:  recovery,
			})
		}
	}
	return rs
}

// expandGRPCCodes replaces "*" with every gRPC code but OK (1 to 16).
func expandGRPCCodes(list []string) []string {
	for i, c := range list {
		if strings.TrimSpace(c) == "*" {
			out := append([]string(nil), list[:i]...)
			for code := 1; code <= 16; code++ {
				out = append(out, strconv.Itoa(code))
			}
			return append(out, expandGRPCCodes(list[i+1:])...)
		}
	}
	return list
}
