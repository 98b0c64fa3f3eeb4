package policy

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/classifier"
	"github.com/policyd/policyd/internal/enums"
	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/strategy"
)

// Reading a policy document: profiles, strategies and their fields; errors
// are *ParseError.

// document is a policy document as parsed: the fleet section is read on
// top of the defaults by build.
type document struct {
	profiles map[string]*parsedProfile
	rules    classifier.RuleSet
	fleet    *yaml.Node
	chains   Chains
	webhooks []Webhook
}

// parseDocument reads a policy document: profiles, classification lists and
// rules, the fleet section and the fallback chains.
func parseDocument(data []byte, file string) (document, error) {
	var doc yaml.Node
	out := document{profiles: map[string]*parsedProfile{}}
	fail := func(err error) (document, error) { return document{}, err }
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fail(errAt(file, 0, "", "%w", err))
	}
	profiles := out.profiles
	if len(doc.Content) == 0 {
		return out, nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return fail(errAt(file, root.Line, "", "the policy must be a mapping with profiles, lists and rules"))
	}
	rulesDoc := &yaml.Node{Kind: yaml.MappingNode, Line: root.Line}
	for i := 0; i+1 < len(root.Content); i += 2 {
		key, val := root.Content[i], root.Content[i+1]
		switch key.Value {
		case "profiles":
			if val.Kind != yaml.MappingNode {
				return fail(errAt(file, val.Line, "profiles", "must be a mapping of name to profile"))
			}
			for j := 0; j+1 < len(val.Content); j += 2 {
				name := val.Content[j].Value
				pp, err := parseProfile(name, val.Content[j+1], file)
				if err != nil {
					return fail(err)
				}
				profiles[name] = pp
			}
		case "lists", "rules", "types":
			rulesDoc.Content = append(rulesDoc.Content, key, val)
		case "fleet":
			out.fleet = val
		case "webhooks":
			hooks, err := parseWebhooks(val, file)
			if err != nil {
				return fail(err)
			}
			out.webhooks = hooks
		case "fallbacks", "context_window_fallbacks", "content_policy_fallbacks":
			chains, err := parseChains(val, file, key.Value)
			if err != nil {
				return fail(err)
			}
			switch key.Value {
			case "fallbacks":
				out.chains.Errors = chains
			case "context_window_fallbacks":
				out.chains.ContextWindow = chains
			default:
				out.chains.ContentPolicy = chains
			}
		default:
			return fail(errAt(file, key.Line, "", "unknown field %q (want profiles, lists, rules, types, fleet, fallbacks, context_window_fallbacks, content_policy_fallbacks or webhooks)", key.Value))
		}
	}
	rs, err := classifier.ParseRuleSetNode(rulesDoc, file)
	if err != nil {
		return fail(err)
	}
	out.rules = rs
	return out, nil
}

var profileNameOK = func(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

func parseProfile(name string, node *yaml.Node, file string) (*parsedProfile, error) {
	path := "profiles." + name
	if !profileNameOK(name) {
		return nil, errAt(file, node.Line, path, "a profile name is 1 to 64 of [a-z0-9_.-]")
	}
	if node.Kind != yaml.MappingNode {
		return nil, errAt(file, node.Line, path, "must be a mapping")
	}
	pp := &parsedProfile{
		profile: &Profile{Name: name, Source: file, Strategies: map[policydv1.FailureType]strategy.Strategy{}, Fleet: fleet.AllOn},
		file:    file, line: node.Line, set: map[string]bool{},
	}
	p := pp.profile
	for i := 0; i+1 < len(node.Content); i += 2 {
		key, val := node.Content[i], node.Content[i+1]
		field := path + "." + key.Value
		pp.set[key.Value] = true
		var err error
		switch key.Value {
		case "description":
			p.Description = strings.TrimSpace(val.Value)
		case "extends":
			pp.extends = val.Value
		case "retry_connect_phase":
			p.RetryConnectPhase, err = parseBool(val)
		case "learned_fallback":
			p.LearnedFallback, err = parseBool(val)
		case "mid_stream_needs_retry_fetch_errors":
			err = fmt.Errorf("removed: coded network failures mid-stream are always retried and a generic \"fetch failed\" needs retry_fetch_errors in every profile (seed 000's isRetryableError); delete the line")
		case "idempotent_methods":
			if val.Kind != yaml.SequenceNode {
				err = fmt.Errorf("must be a list of HTTP methods")
			}
			for _, m := range val.Content {
				p.IdempotentMethods = append(p.IdempotentMethods, strings.ToUpper(m.Value))
			}
		case "budget":
			p.Budget, err = parseDuration(val)
		case "fleet":
			p.Fleet, err = parseSwitches(val)
		case "status_rules":
			p.StatusRules, err = parseStatusRules(val)
		case "default":
			p.Default, err = parseStrategy(val, file, field)
		case "strategies":
			if val.Kind != yaml.MappingNode {
				err = fmt.Errorf("must be a mapping of failure type to strategy")
				break
			}
			for j := 0; j+1 < len(val.Content); j += 2 {
				tkey := val.Content[j]
				t, ok := ParseFailureType(tkey.Value)
				if !ok {
					return nil, errAt(file, tkey.Line, path+".strategies", "%q is not a failure type (want e.g. RATE_LIMIT)", tkey.Value)
				}
				s, err := parseStrategy(val.Content[j+1], file, field+"."+tkey.Value)
				if err != nil {
					return nil, err
				}
				p.Strategies[t] = s
			}
		default:
			err = fmt.Errorf("unknown field (want description, extends, retry_connect_phase, learned_fallback, idempotent_methods, budget, fleet, status_rules, strategies or default)")
		}
		if err != nil {
			if _, ok := errors.AsType[*ParseError](err); ok {
				return nil, err
			}
			return nil, errAt(file, key.Line, field, "%w", err)
		}
	}
	return pp, nil
}

// ParseFailureType reads a failure type by its name, with or without the
// FAILURE_TYPE_ prefix, in any case.
func ParseFailureType(s string) (policydv1.FailureType, bool) {
	return enums.Parse[policydv1.FailureType](s)
}

func parseBool(n *yaml.Node) (bool, error) {
	b, err := strconv.ParseBool(n.Value)
	if err != nil || n.Kind != yaml.ScalarNode {
		return false, fmt.Errorf("%q is not true or false", n.Value)
	}
	return b, nil
}

// parseStrategy reads a strategy mapping; errors name the line and field.
func parseStrategy(node *yaml.Node, file, path string) (strategy.Strategy, error) {
	var s strategy.Strategy
	if node.Kind != yaml.MappingNode {
		return s, errAt(file, node.Line, path, "must be a mapping")
	}
	for i := 0; i+1 < len(node.Content); i += 2 {
		key, val := node.Content[i], node.Content[i+1]
		var err error
		switch key.Value {
		case "retry":
			s.Retry, err = parseBool(val)
		case "max_attempts":
			s.MaxAttempts, err = parseInt(val)
		case "backoff":
			s.Backoff, err = strategy.ParseBackoff(val.Value)
		case "initial_delay":
			s.InitialDelay, err = parseDuration(val)
		case "max_delay":
			s.MaxDelay, err = parseDuration(val)
		case "multiplier":
			s.Multiplier, err = parseFloat(val)
		case "step":
			s.Step, err = parseDuration(val)
		case "jitter":
			s.Jitter, err = strategy.ParseJitter(val.Value)
		case "jitter_fraction":
			s.JitterFraction, err = parseFloat(val)
		case "honor_retry_after":
			s.HonorRetryAfter, err = parseBool(val)
		case "retry_after_mode":
			s.RetryAfterMode, err = strategy.ParseRetryAfterMode(val.Value)
		case "retry_after_padding":
			s.RetryAfterPadding, err = parseFloat(val)
		case "retry_after_ceiling":
			s.RetryAfterCeiling, err = parseDuration(val)
		case "retry_after_above_ceiling":
			s.AboveCeiling, err = strategy.ParseAboveCeiling(val.Value)
		case "retry_after_jitter":
			s.RetryAfterJitter, err = parseFloat(val)
		case "retry_after_zero":
			s.RetryAfterZero, err = strategy.ParseRetryAfterZero(val.Value)
		case "fallback":
			s.Fallback, err = strategy.ParseFallback(val.Value)
		case "fallback_after":
			s.FallbackAfter, err = parseInt(val)
		default:
			err = fmt.Errorf("unknown field (want retry, max_attempts, backoff, initial_delay, max_delay, multiplier, step, " +
				"jitter, jitter_fraction, honor_retry_after, retry_after_mode, retry_after_padding, retry_after_jitter, retry_after_ceiling, " +
				"retry_after_above_ceiling, retry_after_zero, fallback, fallback_after)")
		}
		if err != nil {
			return s, errAt(file, key.Line, path+"."+key.Value, "%w", err)
		}
	}
	if err := s.Validate(); err != nil {
		// Validate says "field: problem": the field joins the path.
		field, problem, _ := strings.Cut(err.Error(), ": ")
		return s, &ParseError{File: file, Line: node.Line, Field: path + "." + field, Err: errors.New(problem)}
	}
	return s, nil
}

func parseInt(n *yaml.Node) (int, error) {
	v, err := strconv.Atoi(n.Value)
	if err != nil {
		return 0, fmt.Errorf("%q is not a whole number", n.Value)
	}
	return v, nil
}

func parseFloat(n *yaml.Node) (float64, error) {
	v, err := strconv.ParseFloat(n.Value, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", n.Value)
	}
	return v, nil
}

func parseDuration(n *yaml.Node) (time.Duration, error) {
	d, err := time.ParseDuration(n.Value)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (want e.g. 500ms, 30s, 2m)", n.Value)
	}
	if d < 0 {
		return 0, fmt.Errorf("%q is negative", n.Value)
	}
	return d, nil
}
