package classifier

import (
	_ "embed"
	"errors"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

//go:embed default_rules.yaml
var defaultRulesYAML []byte

// RuleSet is classification rules as data: named lists and an ordered list
// of rules, the first match deciding. It is what a rules file holds.
type RuleSet struct {
	// Lists are named string lists a condition can reference as "$name".
	Lists map[string][]string `yaml:"lists"`
	// Rules are tried in order; the first one that matches decides.
	Rules []Rule `yaml:"rules"`
	// Types holds each failure type's own text (by type name, with or
	// without the FAILURE_TYPE_ prefix): the one owner of the recovery and
	// manual-action messages that are not a rule's (docs/postmortem.md).
	Types map[string]TypeText `yaml:"types"`
}

// TypeText is a failure type's text, for answers no rule gave.
type TypeText struct {
	// Recovery is the type's recovery action: for a decision on a failure
	// type given without a failure, and for journaled attempts recorded
	// without a classification.
	Recovery string `yaml:"recovery"`
	// ManualAction is what a human must do before the operation can
	// succeed, for the types no retry or fallback fixes; empty for the
	// others. An error report whose last attempt has it is unrecoverable.
	ManualAction string `yaml:"manual_action"`
}

// Rule maps failures that match any of its When blocks to a classification.
type Rule struct {
	// ID names the rule in every answer it decides, e.g. "openai.insufficient_quota".
	ID string `yaml:"id"`
	// When holds alternative condition blocks; the rule matches if one does.
	When []Condition `yaml:"when"`
	// Type is a FailureType name, with or without the FAILURE_TYPE_ prefix.
	Type string `yaml:"type"`
	// Retryable says whether another attempt can succeed.
	Retryable bool `yaml:"retryable"`
	// Reason says why; "{status}" and "{provider}" are filled in.
	Reason string `yaml:"reason"`
	// Recovery is the short, actionable message for the user or model.
	Recovery string `yaml:"recovery"`
	// ContinuationPrompt is sent to continue an invalid stream.
	ContinuationPrompt string `yaml:"continuation_prompt"`
	// Window is the wait a failure gets when it carries no delay hint of its
	// own, e.g. "60s" for a per-minute quota: the quota frees up when its
	// window ends, not after a short backoff.
	Window string `yaml:"window"`
	// Before places an added rule in front of the rule with this id;
	// by default added rules go in front of all built-in ones.
	Before string `yaml:"before"`

	// pos is "file:line" of the rule, for error messages.
	pos string
	// whenPos holds "file:line" of each When block.
	whenPos []string
}

// Condition is one block of conditions; all of its non-empty fields must hold.
// Lists match when any entry matches. Matching is case-insensitive.
type Condition struct {
	Status    []string `yaml:"status"`
	GRPCCode  []string `yaml:"grpc_code"`
	Kind      []string `yaml:"kind"`
	Code      []string `yaml:"code"`
	Name      []string `yaml:"name"`
	Message   []string `yaml:"message"`
	Body      []string `yaml:"body"`
	Text      []string `yaml:"text"`
	Provider  []string `yaml:"provider"`
	Operation []string `yaml:"operation"`
	Phase     []string `yaml:"phase"`
	Profile   []string `yaml:"profile"`
	Option    []string `yaml:"option"`
	// Hint, when set, requires the failure to carry a server delay hint
	// (true) or none (false).
	Hint *bool `yaml:"hint"`
}

// DefaultRuleSet returns the built-in rules, parsed from the embedded rules file.
func DefaultRuleSet() RuleSet {
	rs, err := ParseRuleSet(defaultRulesYAML, "default_rules.yaml")
	if err != nil {
		// The embedded file is tested; failing here is a build defect.
		panic(fmt.Sprintf("classifier: embedded rules: %v", err))
	}
	return rs
}

// ParseRuleSet parses a rules document. Errors name the file, the line and
// the field, and unknown fields are refused.
func ParseRuleSet(data []byte, file string) (RuleSet, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return RuleSet{}, fmt.Errorf("%s: %w", file, err)
	}
	if len(doc.Content) == 0 {
		return RuleSet{}, nil
	}
	return ParseRuleSetNode(doc.Content[0], file)
}

// ParseRuleSetNode parses a rules mapping node (with "lists" and "rules"),
// so that a larger document such as the policy file can embed rules.
func ParseRuleSetNode(node *yaml.Node, file string) (RuleSet, error) {
	var rs RuleSet
	if err := decodeStrict(node, &rs); err != nil {
		return RuleSet{}, fmt.Errorf("%s: %w", file, err)
	}
	rulesNode := mappingValue(node, "rules")
	for i := range rs.Rules {
		r := &rs.Rules[i]
		r.pos = fmt.Sprintf("%s:%d", file, node.Line)
		if rulesNode == nil || i >= len(rulesNode.Content) {
			continue
		}
		item := rulesNode.Content[i]
		r.pos = fmt.Sprintf("%s:%d", file, item.Line)
		if when := mappingValue(item, "when"); when != nil {
			for _, block := range when.Content {
				r.whenPos = append(r.whenPos, fmt.Sprintf("%s:%d", file, block.Line))
			}
		}
	}
	return rs, nil
}

// decodeStrict decodes node into v refusing unknown fields. yaml.Node.Decode
// cannot refuse them itself, so they are checked on the node first, where
// the line numbers are at hand.
func decodeStrict(node *yaml.Node, v any) error {
	if err := checkKnownFields(node, ""); err != nil {
		return err
	}
	if err := node.Decode(v); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			return errors.New(strings.Join(te.Errors, "; "))
		}
		return err
	}
	return nil
}

// knownFields lists the keys each level of a rules document may hold.
var knownFields = map[string][]string{
	"":        {"lists", "rules", "types"},
	"rules[]": {"id", "when", "type", "retryable", "reason", "recovery", "continuation_prompt", "window", "before"},
	"rules[].when[]": {"status", "grpc_code", "kind", "code", "name", "message", "body", "text",
		"provider", "operation", "phase", "profile", "option", "hint"},
}

func checkKnownFields(node *yaml.Node, path string) error {
	allowed, ok := knownFields[path]
	if !ok || node.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(node.Content); i += 2 {
		key, val := node.Content[i], node.Content[i+1]
		if !contains(allowed, key.Value) {
			return fmt.Errorf("line %d: unknown field %q (want one of %s)", key.Line, key.Value, strings.Join(allowed, ", "))
		}
		if val.Kind == yaml.SequenceNode {
			for _, item := range val.Content {
				if err := checkKnownFields(item, joinPath(path, key.Value)+"[]"); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// mappingValue returns the value node of key in a mapping node, or nil.
func mappingValue(node *yaml.Node, key string) *yaml.Node {
	if node == nil || node.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(node.Content); i += 2 {
		if node.Content[i].Value == key {
			return node.Content[i+1]
		}
	}
	return nil
}

// Merge returns base with extra applied: a rule of extra whose id is already
// in base replaces it in place; other rules of extra go in front of the rule
// named by their Before field, or in front of all of base's rules. Lists of
// extra extend base's lists of the same name.
func (base RuleSet) Merge(extra RuleSet) (RuleSet, error) {
	out := RuleSet{Lists: make(map[string][]string, len(base.Lists)+len(extra.Lists))}
	for name, list := range base.Lists {
		out.Lists[name] = append([]string(nil), list...)
	}
	for name, list := range extra.Lists {
		out.Lists[name] = append(out.Lists[name], list...)
	}
	rules := append([]Rule(nil), base.Rules...)
	index := func(id string) int {
		for i, r := range rules {
			if r.ID == id {
				return i
			}
		}
		return -1
	}
	var front []Rule
	for _, r := range extra.Rules {
		if i := index(r.ID); i >= 0 && r.ID != "" {
			rules[i] = r
			continue
		}
		if r.Before == "" {
			front = append(front, r)
			continue
		}
		i := index(r.Before)
		if i < 0 {
			return RuleSet{}, fmt.Errorf("%s: rule %q: before: no rule %q", r.pos, r.ID, r.Before)
		}
		rules = append(rules[:i], append([]Rule{r}, rules[i:]...)...)
	}
	out.Rules = append(front, rules...)
	out.Types = make(map[string]TypeText, len(base.Types)+len(extra.Types))
	for name, t := range base.Types {
		out.Types[name] = t
	}
	for name, t := range extra.Types {
		out.Types[name] = t
	}
	return out, nil
}
