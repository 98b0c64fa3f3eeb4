package policy

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/fleet"
)

// Chains are the policy file's fallback chains, in LiteLLM's convention:
// for a provider/model, the ordered targets to use next on errors
// (`fallbacks`), on an input too long (`context_window_fallbacks`) and on a
// content refusal (`content_policy_fallbacks`).
type Chains struct {
	Errors, ContextWindow, ContentPolicy map[string][]ChainTarget
}

// ChainTarget is a provider and model, and optionally the key it is called with.
type ChainTarget struct{ Provider, Model, KeyID string }

func (t ChainTarget) String() string {
	s := t.Provider + "/" + t.Model
	if t.KeyID != "" {
		s += "@" + t.KeyID
	}
	return s
}

// chainKey is how a chain is looked up: "provider/model", provider in lower case.
func chainKey(provider, model string) string { return strings.ToLower(provider) + "/" + model }

// parseTarget reads "provider/model" or "provider/model@key". The model may
// contain slashes (OpenRouter's "anthropic/claude-sonnet-4.5").
func parseTarget(s string) (ChainTarget, error) {
	var t ChainTarget
	if at := strings.LastIndexByte(s, '@'); at >= 0 {
		s, t.KeyID = s[:at], s[at+1:]
	}
	provider, model, ok := strings.Cut(s, "/")
	if !ok || provider == "" || model == "" || (t.KeyID == "" && strings.HasSuffix(s, "@")) {
		return t, fmt.Errorf("%q is not provider/model (e.g. anthropic/claude-sonnet-4-5, optionally @key)", s)
	}
	t.Provider, t.Model = strings.ToLower(provider), model
	return t, nil
}

// parseChains reads one chain section: a mapping of provider/model to a list
// of targets.
func parseChains(node *yaml.Node, file, section string) (map[string][]ChainTarget, error) {
	if node.Kind != yaml.MappingNode {
		return nil, errAt(file, node.Line, section, "must be a mapping of provider/model to a list of provider/model targets")
	}
	out := map[string][]ChainTarget{}
	for i := 0; i+1 < len(node.Content); i += 2 {
		key, val := node.Content[i], node.Content[i+1]
		from, err := parseTarget(key.Value)
		if err != nil || from.KeyID != "" {
			return nil, errAt(file, key.Line, section, "%q is not provider/model", key.Value)
		}
		if val.Kind != yaml.SequenceNode || len(val.Content) == 0 {
			return nil, errAt(file, val.Line, section+"."+key.Value, "must be a non-empty list of provider/model targets")
		}
		for _, n := range val.Content {
			t, err := parseTarget(n.Value)
			if err != nil {
				return nil, errAt(file, n.Line, section+"."+key.Value, "%w", err)
			}
			if t.Provider == from.Provider && t.Model == from.Model {
				return nil, errAt(file, n.Line, section+"."+key.Value, "a model cannot fall back to itself")
			}
			out[chainKey(from.Provider, from.Model)] = append(out[chainKey(from.Provider, from.Model)], t)
		}
	}
	return out, nil
}

// GateFallback is where a client's gate sends first attempts to t that an
// assignment does not admit (cause as fleet.Assignment.Cause): the first
// target of t's error chain that the fleet says is available, else only the
// kind — another model when the model's breaker is the obstacle, another
// provider (or key) otherwise — for the caller's own fallback to choose.
func (p *Policy) GateFallback(t fleet.Target, cause fleet.Cause, f *fleet.Fleet) *policydv1.Fallback {
	var skipped []string
	for _, target := range p.Chains.Errors[chainKey(t.Provider, t.Model)] {
		if f != nil {
			if ok, why := f.Available(fleet.Target{Tenant: t.Tenant, Provider: target.Provider, Model: target.Model, KeyID: target.KeyID}); !ok {
				skipped = append(skipped, fmt.Sprintf("%s (%s)", target, why))
				continue
			}
		}
		kind := policydv1.FallbackKind_FALLBACK_KIND_OTHER_MODEL
		if !strings.EqualFold(target.Provider, t.Provider) {
			kind = policydv1.FallbackKind_FALLBACK_KIND_OTHER_PROVIDER
		}
		return &policydv1.Fallback{Kind: kind, Provider: target.Provider, Model: target.Model, Reason: "the fleet's gate does not admit this call; fall back to " + target.String()}
	}
	kind := policydv1.FallbackKind_FALLBACK_KIND_OTHER_PROVIDER
	if cause == fleet.CauseBreaker {
		kind = policydv1.FallbackKind_FALLBACK_KIND_OTHER_MODEL
	}
	reason := "the fleet's gate does not admit this call"
	if len(skipped) > 0 {
		reason += "; every target of the fallback chain is unavailable: " + strings.Join(skipped, ", ")
	}
	return &policydv1.Fallback{Kind: kind, Reason: reason}
}
