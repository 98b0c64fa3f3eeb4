package policy

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
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
