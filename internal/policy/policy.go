// Package policy holds the retry policy in force — profiles (failure type →
// strategy), classification rules and global caps — loads it from the
// built-ins, an operator's policy file and the environment, and answers
// NextDelay with it.
package policy

import (
	_ "embed"
	"fmt"
	"os"
	"sort"
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

//go:embed builtin_profiles.yaml
var builtinProfilesYAML []byte

// DefaultProfile is the profile used when a request names none.
const DefaultProfile = "default"

// Policy is one immutable snapshot of the policy in force. A reload builds a
// new Policy; requests in flight keep the one they started with.
type Policy struct {
	// Profiles by name.
	Profiles map[string]*Profile
	// Classifier applies the built-in rules merged with the file's.
	Classifier *classifier.Classifier
	// Caps are the global caps from the environment.
	Caps Caps
	// Source is the policy file, or "built-in".
	Source string
	// Fleet configures fleet memory (the file's `fleet:` over the defaults).
	Fleet fleet.Config
	// Chains are the file's fallback chains.
	Chains Chains
}

// Profile is a named table: failure type → strategy.
type Profile struct {
	Name        string
	Description string
	// Source is "built-in" or the file that defined or changed the profile.
	Source string
	// Strategies by failure type; types not listed get Default.
	Strategies map[policydv1.FailureType]strategy.Strategy
	Default    strategy.Strategy
	// RetryConnectPhase: whether failures in a stream's connect phase are retried.
	RetryConnectPhase bool
	// IdempotentMethods are HTTP methods safe to repeat besides GET, HEAD, OPTIONS.
	IdempotentMethods []string
	// applied holds, per failure type, the strategy with the global caps
	// applied and its API rendering, built once per policy so that a
	// decision does not re-render it.
	applied map[policydv1.FailureType]appliedStrategy

	// Budget is the total time allowed since the first attempt (the request's
	// elapsed); a retry that would exceed it stops. 0: none (seed 000 shares
	// one timeout across attempts; callers can also send a deadline).
	Budget time.Duration
	// Fleet turns fleet memory's mechanisms on or off for this profile's
	// decisions (all on by default).
	Fleet fleet.Switches
}

// StrategyFor returns the strategy for a failure type, named "<profile>/<TYPE>".
func (p *Profile) StrategyFor(t policydv1.FailureType) strategy.Strategy {
	s, ok := p.Strategies[t]
	if !ok {
		s = p.Default
	}
	s.Name = p.Name + "/" + enums.Short(t)
	return s
}

// appliedStrategy is a strategy ready for decisions.
type appliedStrategy struct {
	strategy strategy.Strategy
	proto    *policydv1.AppliedStrategy // shared by responses: never mutate
}

// prepare renders the profile's strategy for every failure type, with the
// caps' Retry-After ceiling applied.
func (p *Profile) prepare(caps Caps) {
	p.applied = make(map[policydv1.FailureType]appliedStrategy, len(policydv1.FailureType_name))
	for v := range policydv1.FailureType_name {
		t := policydv1.FailureType(v)
		s := p.StrategyFor(t)
		if caps.MaxRetryAfter > 0 && s.HonorRetryAfter && (s.HintCeiling == 0 || caps.MaxRetryAfter < s.HintCeiling) {
			s.HintCeiling = caps.MaxRetryAfter
		}
		p.applied[t] = appliedStrategy{strategy: s, proto: &policydv1.AppliedStrategy{
			Name: s.Name, Summary: s.String(), Parameters: StrategyProto(s),
		}}
	}
}

// ProfileNames returns the profile names, sorted.
func (p *Policy) ProfileNames() []string {
	names := make([]string, 0, len(p.Profiles))
	for n := range p.Profiles {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Builtin returns the built-in policy with no caps.
func Builtin() *Policy {
	p, err := build(nil, "", Caps{})
	if err != nil {
		panic("policy: built-in profiles: " + err.Error())
	}
	return p
}

// Load builds the policy from the built-ins, the policy file at path (none
// when empty) and the global caps in env (os.Getenv when nil). Errors name
// the file, line and field, or the environment variable.
func Load(path string, env func(string) string) (*Policy, error) {
	if env == nil {
		env = os.Getenv
	}
	caps, err := CapsFromEnv(env)
	if err != nil {
		return nil, err
	}
	var data []byte
	if path != "" {
		if data, err = os.ReadFile(path); err != nil {
			return nil, fmt.Errorf("read policy file: %w", err)
		}
	}
	return build(data, path, caps)
}

// Parse builds a policy from a policy document's bytes (file names errors).
func Parse(data []byte, file string, caps Caps) (*Policy, error) {
	return build(data, file, caps)
}

func build(fileData []byte, file string, caps Caps) (*Policy, error) {
	builtin, err := parseDocument(builtinProfilesYAML, "built-in")
	if err != nil {
		return nil, err
	}
	profiles := builtin.profiles
	rules := classifier.DefaultRuleSet()
	source := "built-in"
	fleetCfg := fleet.Defaults()
	var chains Chains
	if fileData != nil {
		source = file
		if len(strings.TrimSpace(string(fileData))) == 0 {
			// Refused so that a reload reading a half-written file keeps the
			// old policy instead of silently dropping the file's profiles.
			return nil, fmt.Errorf("%s: the policy file is empty (write at least `profiles: {}`)", file)
		}
		doc, err := parseDocument(fileData, file)
		if err != nil {
			return nil, err
		}
		if err := overlayProfiles(profiles, doc.profiles); err != nil {
			return nil, err
		}
		if rules, err = rules.Merge(doc.rules); err != nil {
			return nil, err
		}
		if doc.fleet != nil {
			if err := parseFleet(doc.fleet, file, &fleetCfg); err != nil {
				return nil, err
			}
		}
		chains = doc.chains
	}
	c, err := classifier.New(rules)
	if err != nil {
		return nil, err
	}
	out := &Policy{Profiles: make(map[string]*Profile, len(profiles)), Classifier: c, Caps: caps, Source: source,
		Fleet: fleetCfg, Chains: chains}
	for name, pp := range profiles {
		pp.profile.prepare(caps)
		out.Profiles[name] = pp.profile
	}
	if _, ok := out.Profiles[DefaultProfile]; !ok {
		return nil, fmt.Errorf("policy: no %q profile", DefaultProfile)
	}
	return out, nil
}

// overlayProfiles applies a file's profiles on top of the built-in ones. A
// profile extends a built-in one or another profile of the same file.
func overlayProfiles(profiles, fileProfiles map[string]*parsedProfile) error {
	builtin := make(map[string]*parsedProfile, len(profiles))
	for name, pp := range profiles {
		builtin[name] = pp
	}
	done := map[string]bool{}
	var resolve func(name string, chain []string) error
	resolve = func(name string, chain []string) error {
		fp := fileProfiles[name]
		if done[name] {
			return nil
		}
		for _, c := range chain {
			if c == name {
				return fmt.Errorf("%s: profiles.%s.extends: a cycle (%s → %s)", fp.pos, name, strings.Join(chain, " → "), name)
			}
		}
		base := builtin[name]
		if fp.extends != "" {
			if _, inFile := fileProfiles[fp.extends]; inFile && fp.extends != name {
				if err := resolve(fp.extends, append(chain, name)); err != nil {
					return err
				}
				base = profiles[fp.extends]
			} else if base = builtin[fp.extends]; base == nil {
				return fmt.Errorf("%s: profiles.%s.extends: no profile %q", fp.pos, name, fp.extends)
			}
		}
		profiles[name] = fp.overlay(base)
		done[name] = true
		return nil
	}
	names := make([]string, 0, len(fileProfiles))
	for name := range fileProfiles {
		names = append(names, name)
	}
	sort.Strings(names) // the same first error every time
	for _, name := range names {
		if err := resolve(name, nil); err != nil {
			return err
		}
	}
	return nil
}

// parsedProfile is a profile as one document states it: only the fields it
// sets, so that a file can change a built-in profile field by field.
type parsedProfile struct {
	profile *Profile
	pos     string
	extends string
	set     map[string]bool // top-level keys present
}

// overlay applies the file's profile on top of base (nil for a new profile).
func (fp *parsedProfile) overlay(base *parsedProfile) *parsedProfile {
	if base == nil {
		return fp
	}
	p := *base.profile
	p.Name, p.Source = fp.profile.Name, fp.profile.Source
	p.Strategies = make(map[policydv1.FailureType]strategy.Strategy, len(base.profile.Strategies))
	for t, s := range base.profile.Strategies {
		p.Strategies[t] = s
	}
	for t, s := range fp.profile.Strategies {
		p.Strategies[t] = s
	}
	if fp.set["description"] {
		p.Description = fp.profile.Description
	}
	if fp.set["default"] {
		p.Default = fp.profile.Default
	}
	if fp.set["retry_connect_phase"] {
		p.RetryConnectPhase = fp.profile.RetryConnectPhase
	}
	if fp.set["idempotent_methods"] {
		p.IdempotentMethods = fp.profile.IdempotentMethods
	}
	if fp.set["budget"] {
		p.Budget = fp.profile.Budget
	}
	if fp.set["fleet"] {
		p.Fleet = fp.profile.Fleet
	}
	return &parsedProfile{profile: &p, pos: fp.pos, set: fp.set}
}

// document is a policy document as parsed: the fleet section is read on
// top of the defaults by build.
type document struct {
	profiles map[string]*parsedProfile
	rules    classifier.RuleSet
	fleet    *yaml.Node
	chains   Chains
}

// parseDocument reads a policy document: profiles, classification lists and
// rules, the fleet section and the fallback chains.
func parseDocument(data []byte, file string) (document, error) {
	var doc yaml.Node
	out := document{profiles: map[string]*parsedProfile{}}
	fail := func(err error) (document, error) { return document{}, err }
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fail(fmt.Errorf("%s: %w", file, err))
	}
	profiles := out.profiles
	if len(doc.Content) == 0 {
		return out, nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return fail(fmt.Errorf("%s:%d: the policy must be a mapping with profiles, lists and rules", file, root.Line))
	}
	rulesDoc := &yaml.Node{Kind: yaml.MappingNode, Line: root.Line}
	for i := 0; i+1 < len(root.Content); i += 2 {
		key, val := root.Content[i], root.Content[i+1]
		switch key.Value {
		case "profiles":
			if val.Kind != yaml.MappingNode {
				return fail(fmt.Errorf("%s:%d: profiles: must be a mapping of name to profile", file, val.Line))
			}
			for j := 0; j+1 < len(val.Content); j += 2 {
				name := val.Content[j].Value
				pp, err := parseProfile(name, val.Content[j+1], file)
				if err != nil {
					return fail(err)
				}
				profiles[name] = pp
			}
		case "lists", "rules":
			rulesDoc.Content = append(rulesDoc.Content, key, val)
		case "fleet":
			out.fleet = val
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
			return fail(fmt.Errorf("%s:%d: unknown field %q (want profiles, lists, rules, fleet, fallbacks, context_window_fallbacks or content_policy_fallbacks)", file, key.Line, key.Value))
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
	at := func(n *yaml.Node) string { return fmt.Sprintf("%s:%d", file, n.Line) }
	path := "profiles." + name
	if !profileNameOK(name) {
		return nil, fmt.Errorf("%s: %s: a profile name is 1 to 64 of [a-z0-9_.-]", at(node), path)
	}
	if node.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s: %s: must be a mapping", at(node), path)
	}
	pp := &parsedProfile{
		profile: &Profile{Name: name, Source: file, Strategies: map[policydv1.FailureType]strategy.Strategy{}, Fleet: fleet.AllOn},
		pos:     at(node), set: map[string]bool{},
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
					return nil, fmt.Errorf("%s: %s.strategies: %q is not a failure type (want e.g. RATE_LIMIT)", at(tkey), path, tkey.Value)
				}
				s, err := parseStrategy(val.Content[j+1], file, field+"."+tkey.Value)
				if err != nil {
					return nil, err
				}
				p.Strategies[t] = s
			}
		default:
			err = fmt.Errorf("unknown field (want description, extends, retry_connect_phase, idempotent_methods, budget, fleet, strategies or default)")
		}
		if err != nil {
			if strings.HasPrefix(err.Error(), file+":") {
				return nil, err
			}
			return nil, fmt.Errorf("%s: %s: %w", at(key), field, err)
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
		return s, fmt.Errorf("%s:%d: %s: must be a mapping", file, node.Line, path)
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
			s.Initial, err = parseDuration(val)
		case "max_delay":
			s.Max, err = parseDuration(val)
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
			s.HintMode, err = strategy.ParseHintMode(val.Value)
		case "retry_after_padding":
			s.HintPadding, err = parseFloat(val)
		case "retry_after_ceiling":
			s.HintCeiling, err = parseDuration(val)
		case "retry_after_above_ceiling":
			s.AboveCeiling, err = strategy.ParseAboveCeiling(val.Value)
		case "retry_after_jitter":
			s.HintJitter, err = parseFloat(val)
		case "fallback":
			s.Fallback, err = strategy.ParseFallback(val.Value)
		case "fallback_after":
			s.FallbackAfter, err = parseInt(val)
		default:
			err = fmt.Errorf("unknown field (want retry, max_attempts, backoff, initial_delay, max_delay, multiplier, step, " +
				"jitter, jitter_fraction, honor_retry_after, retry_after_mode, retry_after_padding, retry_after_jitter, retry_after_ceiling, " +
				"retry_after_above_ceiling, fallback, fallback_after)")
		}
		if err != nil {
			return s, fmt.Errorf("%s:%d: %s.%s: %w", file, key.Line, path, key.Value, err)
		}
	}
	if err := s.Validate(); err != nil {
		return s, fmt.Errorf("%s:%d: %s.%w", file, node.Line, path, err)
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
