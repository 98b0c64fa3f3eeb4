package policy

import (
	"errors"
	"slices"
	"testing"
)

func TestWebhooksSection(t *testing.T) {
	t.Parallel()
	doc := `webhooks:
  - url: https://hooks.example.test/policyd
    secret_env: POLICYD_HOOK_SECRET
    events: [breaker_opened, incident_resolved]
  - url: http://127.0.0.1:9000/all
    secret_env: OTHER_SECRET
`
	p, err := Parse([]byte(doc), "p.yaml", Caps{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Webhooks) != 2 {
		t.Fatalf("webhooks = %+v", p.Webhooks)
	}
	w := p.Webhooks[0]
	if w.URL != "https://hooks.example.test/policyd" || w.SecretEnv != "POLICYD_HOOK_SECRET" || w.File != "p.yaml" || w.Line != 2 ||
		!slices.Equal(w.Events, []string{"breaker_opened", "incident_resolved"}) {
		t.Errorf("first webhook = %+v", w)
	}
	if got := p.Webhooks[1].Events; !slices.Equal(got, WebhookEvents) {
		t.Errorf("a webhook listing no events gets %v, want all of %v", got, WebhookEvents)
	}
	if p, err := Parse([]byte("profiles: {}\n"), "p.yaml", Caps{}); err != nil || len(p.Webhooks) != 0 {
		t.Errorf("no section: %v, %v", p.Webhooks, err)
	}
}

func TestBadWebhooksNameLineAndField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		doc  string
		want []string
	}{
		{"not a list", "webhooks:\n  url: http://x\n", []string{"p.yaml:2", "webhooks", "list"}},
		{"entry not a mapping", "webhooks:\n  - http://x\n", []string{"p.yaml:2", "webhooks[0]"}},
		{"bad url", "webhooks:\n  - url: ftp://x/y\n    secret_env: S\n", []string{"p.yaml:2", "webhooks[0].url", `"ftp://x/y"`}},
		{"relative url", "webhooks:\n  - secret_env: S\n    url: /hook\n", []string{"p.yaml:3", "webhooks[0].url"}},
		{"url with credentials", "webhooks:\n  - url: https://u:p@x/\n    secret_env: S\n", []string{"p.yaml:2", "credentials"}},
		{"missing url", "webhooks:\n  - secret_env: S\n", []string{"p.yaml:2", "webhooks[0].url", "missing"}},
		{"missing secret", "webhooks:\n  - url: http://x/\n", []string{"p.yaml:2", "webhooks[0].secret_env", "missing"}},
		{"bad secret name", "webhooks:\n  - url: http://x/\n    secret_env: 'my secret'\n", []string{"p.yaml:3", "secret_env", `"my secret"`}},
		{"bad event", "webhooks:\n  - url: http://x/\n    secret_env: S\n    events:\n      - breaker_opened\n      - lunch\n",
			[]string{"p.yaml:6", "webhooks[0].events", `"lunch"`}},
		{"events not a list", "webhooks:\n  - url: http://x/\n    secret_env: S\n    events: breaker_opened\n", []string{"p.yaml:4", "events"}},
		{"unknown field", "webhooks:\n  - url: http://x/\n    secret_env: S\n    retries: 9\n", []string{"p.yaml:4", "webhooks[0].retries"}},
		{"second entry", "webhooks:\n  - url: http://x/\n    secret_env: S\n  - url: nope\n    secret_env: S\n", []string{"p.yaml:4", "webhooks[1].url"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := refused(t, tc.doc, tc.want)
			if _, ok := errors.AsType[*ParseError](err); !ok {
				t.Errorf("%T is not a *ParseError: %v", err, err)
			}
		})
	}
}
