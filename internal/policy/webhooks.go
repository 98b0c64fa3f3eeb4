package policy

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// WebhookEvents are the names a webhook's `events:` may list, in the order
// the documentation gives them: a breaker opened, a key stopped fleet-wide,
// a retry budget spent, and an incident resolved (a breaker closed again).
var WebhookEvents = []string{"breaker_opened", "key_stopped", "budget_exhausted", "incident_resolved"}

// Webhook is one entry of the policy file's `webhooks:` section: where
// fleet transitions are pushed, as CloudEvents signed with a shared
// secret. The secret itself is never in the file: SecretEnv names the
// environment variable that holds it, read when the daemon starts.
type Webhook struct {
	// URL receives a POST per event (http or https).
	URL string
	// SecretEnv is the environment variable holding the signing secret.
	SecretEnv string
	// Events are the event names delivered (WebhookEvents); all of them
	// when the entry lists none.
	Events []string
	// File and Line locate the entry, for errors found after parsing
	// (an unset SecretEnv).
	File string
	Line int
}

var envNameOK = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// parseWebhooks reads `webhooks: [{url, secret_env, events}, ...]`.
func parseWebhooks(node *yaml.Node, file string) ([]Webhook, error) {
	if node.Kind != yaml.SequenceNode {
		return nil, errAt(file, node.Line, "webhooks", "must be a list of {url, secret_env, events}")
	}
	var out []Webhook
	for i, n := range node.Content {
		path := fmt.Sprintf("webhooks[%d]", i)
		if n.Kind != yaml.MappingNode {
			return nil, errAt(file, n.Line, path, "must be a mapping of url, secret_env and events")
		}
		w := Webhook{File: file, Line: n.Line}
		for j := 0; j+1 < len(n.Content); j += 2 {
			k, v := n.Content[j], n.Content[j+1]
			field := path + "." + k.Value
			switch k.Value {
			case "url":
				u, err := url.Parse(v.Value)
				if v.Kind != yaml.ScalarNode || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
					return nil, errAt(file, v.Line, field, "%q is not an http or https URL", v.Value)
				}
				if u.User != nil {
					return nil, errAt(file, v.Line, field, "must not carry credentials (the secret_env signs the events)")
				}
				w.URL = v.Value
			case "secret_env":
				if v.Kind != yaml.ScalarNode || !envNameOK.MatchString(v.Value) {
					return nil, errAt(file, v.Line, field, "%q is not an environment variable name", v.Value)
				}
				w.SecretEnv = v.Value
			case "events":
				if v.Kind != yaml.SequenceNode {
					return nil, errAt(file, v.Line, field, "must be a list of %s", strings.Join(WebhookEvents, ", "))
				}
				for _, e := range v.Content {
					if !slices.Contains(WebhookEvents, e.Value) {
						return nil, errAt(file, e.Line, field, "%q is not an event (want %s)", e.Value, strings.Join(WebhookEvents, ", "))
					}
					if !slices.Contains(w.Events, e.Value) {
						w.Events = append(w.Events, e.Value)
					}
				}
			default:
				return nil, errAt(file, k.Line, field, "unknown field (want url, secret_env or events)")
			}
		}
		switch {
		case w.URL == "":
			return nil, errAt(file, n.Line, path+".url", "missing")
		case w.SecretEnv == "":
			return nil, errAt(file, n.Line, path+".secret_env", "missing: name the environment variable that holds the signing secret")
		}
		if len(w.Events) == 0 {
			w.Events = slices.Clone(WebhookEvents)
		}
		out = append(out, w)
	}
	return out, nil
}
