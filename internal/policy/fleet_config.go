package policy

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/policyd/policyd/internal/fleet"
)

// parseFleet reads the policy file's `fleet:` section on top of the
// defaults: scopes, hold, stop, breaker and retry_budget settings.
func parseFleet(node *yaml.Node, file string, cfg *fleet.Config) error {
	at := func(n *yaml.Node, path string, err error) error {
		return errAt(file, n.Line, "fleet."+path, "%w", err)
	}
	if node.Kind != yaml.MappingNode {
		return errAt(file, node.Line, "fleet", "must be a mapping (scopes, hold, stop, breaker, retry_budget, slow_start, pacing, stream)")
	}
	// Each section's fields, as pointers into cfg.
	sections := map[string]map[string]any{
		"hold": {
			"spread": &cfg.Hold.Spread, "min_spread": &cfg.Hold.MinSpread, "max_spread": &cfg.Hold.MaxSpread,
			"max_hint": &cfg.Hold.MaxHint,
		},
		"stop": {"for": &cfg.Stop.For},
		"breaker": {
			"min_volume": &cfg.Breaker.MinVolume, "failure_rate": &cfg.Breaker.FailureRate,
			// failures: min_volume's name before the streams reported
			// successes; with none reported it still means the failures
			// that open the breaker, so files that use it keep working.
			"failures":    &cfg.Breaker.MinVolume,
			"min_clients": &cfg.Breaker.MinClients, "window": &cfg.Breaker.Window,
			"trip_window": &cfg.Breaker.TripWindow, "trip_rate": &cfg.Breaker.TripRate,
			"open_for": &cfg.Breaker.OpenFor, "max_open_for": &cfg.Breaker.MaxOpenFor,
			"probe_interval": &cfg.Breaker.ProbeInterval, "close_successes": &cfg.Breaker.CloseSuccesses,
			"close_after": &cfg.Breaker.CloseAfter,
		},
		"retry_budget": {"burst": &cfg.Budget.Burst, "floor": &cfg.Budget.Floor, "ratio": &cfg.Budget.Ratio},
		"slow_start":   {"window": &cfg.SlowStart.Window, "from": &cfg.SlowStart.From},
		"pacing":       {"share": &cfg.Pacing.Share},
		"stream":       {"ttl": &cfg.Stream.TTL, "abandon_after": &cfg.Stream.AbandonAfter},
	}
	for i := 0; i+1 < len(node.Content); i += 2 {
		key, val := node.Content[i], node.Content[i+1]
		if key.Value == "scopes" {
			if err := parseScopes(val, file, cfg.Scopes); err != nil {
				return err
			}
			continue
		}
		if key.Value == "max_buckets" {
			v, err := parseInt(val)
			if err != nil {
				return at(key, key.Value, err)
			}
			cfg.MaxBuckets = v
			continue
		}
		if key.Value == "idle_after" {
			v, err := parseDuration(val)
			if err != nil {
				return at(key, key.Value, err)
			}
			cfg.IdleAfter = v
			continue
		}
		if key.Value == "max_in_flight" {
			m, err := parseInFlightCaps(val, file)
			if err != nil {
				return err
			}
			cfg.MaxInFlight = m
			continue
		}
		if key.Value == "reports_per_second" {
			v, err := parseFloat(val)
			if err != nil {
				return at(key, key.Value, err)
			}
			cfg.ReportsPerSecond = v
			continue
		}
		fields, ok := sections[key.Value]
		if !ok {
			return at(key, key.Value, fmt.Errorf("unknown field (want scopes, hold, stop, breaker, retry_budget, slow_start, pacing, stream, max_buckets, max_in_flight, reports_per_second or idle_after)"))
		}
		if val.Kind != yaml.MappingNode {
			return at(val, key.Value, fmt.Errorf("must be a mapping"))
		}
		for j := 0; j+1 < len(val.Content); j += 2 {
			k, v := val.Content[j], val.Content[j+1]
			path := key.Value + "." + k.Value
			var err error
			switch p := fields[k.Value].(type) {
			case *time.Duration:
				*p, err = parseDuration(v)
			case *float64:
				*p, err = parseFloat(v)
			case *int:
				*p, err = parseInt(v)
			default:
				err = fmt.Errorf("unknown field (want %s)", strings.Join(sortedKeys(fields), ", "))
			}
			if err != nil {
				return at(k, path, err)
			}
		}
	}
	if err := cfg.Validate(); err != nil {
		return errAt(file, node.Line, "fleet", "%w", err)
	}
	return nil
}

// parseInFlightCaps reads `max_in_flight: {provider/model: N, provider: N}`.
func parseInFlightCaps(node *yaml.Node, file string) (map[string]int, error) {
	if node.Kind != yaml.MappingNode {
		return nil, errAt(file, node.Line, "fleet.max_in_flight", "must be a mapping of provider or provider/model to a cap")
	}
	caps := make(map[string]int, len(node.Content)/2)
	for i := 0; i+1 < len(node.Content); i += 2 {
		k, v := node.Content[i], node.Content[i+1]
		n, err := parseInt(v)
		if err != nil {
			return nil, errAt(file, v.Line, "fleet.max_in_flight."+k.Value, "%w", err)
		}
		caps[strings.ToLower(k.Value)] = n
	}
	return caps, nil
}

// parseScopes reads `scopes: {rate_limit: [provider, key, model], ...}`.
func parseScopes(node *yaml.Node, file string, scopes fleet.Scopes) error {
	if node.Kind != yaml.MappingNode {
		return errAt(file, node.Line, "fleet.scopes", "must be a mapping of scope to fields")
	}
	for i := 0; i+1 < len(node.Content); i += 2 {
		key, val := node.Content[i], node.Content[i+1]
		s, err := fleet.ParseScope(key.Value)
		if err != nil {
			return errAt(file, key.Line, "fleet.scopes", "%w", err)
		}
		if val.Kind != yaml.SequenceNode {
			return errAt(file, val.Line, "fleet.scopes."+key.Value, "must be a list of provider, model and key")
		}
		var f fleet.Fields
		for _, n := range val.Content {
			switch n.Value {
			case "provider":
				f.Provider = true
			case "model":
				f.Model = true
			case "key":
				f.Key = true
			default:
				return errAt(file, n.Line, "fleet.scopes."+key.Value, "%q is not a field (want provider, model or key; the tenant always counts)", n.Value)
			}
		}
		scopes[s] = f
	}
	return nil
}

// parseSwitches reads a profile's `fleet:` — `off`, `on`, or a mapping of
// hold, stop, breaker and retry_budget to true or false.
func parseSwitches(node *yaml.Node) (fleet.Switches, error) {
	if node.Kind == yaml.ScalarNode {
		switch node.Value {
		case "on", "true":
			return fleet.AllOn, nil
		case "off", "false":
			return fleet.Switches{}, nil
		}
		return fleet.Switches{}, fmt.Errorf("%q is not on, off or a mapping of hold, stop, breaker and retry_budget", node.Value)
	}
	if node.Kind != yaml.MappingNode {
		return fleet.Switches{}, fmt.Errorf("must be on, off or a mapping of hold, stop, breaker and retry_budget")
	}
	sw := fleet.AllOn
	for i := 0; i+1 < len(node.Content); i += 2 {
		key, val := node.Content[i], node.Content[i+1]
		b, err := parseBool(val)
		if err != nil {
			return sw, fmt.Errorf("%s: %w", key.Value, err)
		}
		switch key.Value {
		case "hold":
			sw.Hold = b
		case "stop":
			sw.Stop = b
		case "breaker":
			sw.Breaker = b
		case "retry_budget":
			sw.Budget = b
		default:
			return sw, fmt.Errorf("%s: unknown field (want hold, stop, breaker or retry_budget)", key.Value)
		}
	}
	return sw, nil
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
