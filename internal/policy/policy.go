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
	"strings"
	"time"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/classifier"
	"github.com/policyd/policyd/internal/enums"
	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/strategy"
)

//go:embed builtin_profiles.yaml
var builtinProfilesYAML []byte

// DefaultProfile is the profile used when a request names none: the
// classifier's, so that one name serves rules and profiles.
const DefaultProfile = classifier.DefaultProfile

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
	// Webhooks are the file's `webhooks:`, where fleet transitions are
	// pushed (internal/webhook); none by default.
	Webhooks []Webhook
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
	// LearnedFallback: whether a failure no rule recognises is answered from
	// the labelled failures it most resembles instead of UNKNOWN (the
	// classifier's learned fallback).
	LearnedFallback bool
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
	// StatusRules are the profile's own verdicts on statuses (optionally per
	// provider), ahead of the rules table; see StatusRule.
	StatusRules []StatusRule
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
		if caps.MaxRetryAfter > 0 && s.HonorRetryAfter && (s.RetryAfterCeiling == 0 || caps.MaxRetryAfter < s.RetryAfterCeiling) {
			s.RetryAfterCeiling = caps.MaxRetryAfter
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
	var (
		chains   Chains
		webhooks []Webhook
	)
	if fileData != nil {
		source = file
		if len(strings.TrimSpace(string(fileData))) == 0 {
			// Refused so that a reload reading a half-written file keeps the
			// old policy instead of silently dropping the file's profiles.
			return nil, errAt(file, 0, "", "the policy file is empty (write at least `profiles: {}`)")
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
		if rules, err = rules.Merge(statusRuleSet(profiles)); err != nil {
			return nil, err
		}
		if doc.fleet != nil {
			if err := parseFleet(doc.fleet, file, &fleetCfg); err != nil {
				return nil, err
			}
		}
		chains = doc.chains
		webhooks = doc.webhooks
	}
	var learnedIn []string
	for name, pp := range profiles {
		if pp.profile.LearnedFallback {
			learnedIn = append(learnedIn, name)
		}
	}
	c, err := classifier.New(rules, classifier.WithLearnedFallback(nil, learnedIn...))
	if err != nil {
		return nil, err
	}
	out := &Policy{Profiles: make(map[string]*Profile, len(profiles)), Classifier: c, Caps: caps, Source: source,
		Fleet: fleetCfg, Chains: chains, Webhooks: webhooks}
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
				return errAt(fp.file, fp.line, "profiles."+name+".extends", "a cycle (%s → %s)", strings.Join(chain, " → "), name)
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
				return errAt(fp.file, fp.line, "profiles."+name+".extends", "no profile %q", fp.extends)
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
	file    string
	line    int
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
	if fp.set["learned_fallback"] {
		p.LearnedFallback = fp.profile.LearnedFallback
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
	if fp.set["status_rules"] {
		p.StatusRules = fp.profile.StatusRules
	}
	return &parsedProfile{profile: &p, file: fp.file, line: fp.line, set: fp.set}
}
