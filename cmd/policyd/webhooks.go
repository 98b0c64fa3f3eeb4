package main

import (
	"fmt"
	"slices"

	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/metrics"
	"github.com/policyd/policyd/internal/policy"
	"github.com/policyd/policyd/internal/webhook"
)

// withWebhooks also hands sink's events to a webhook.Notifier for
// cfg.webhooks, run by lc: its queues never block the deciding goroutine.
func withWebhooks(sink fleet.Sink, cfg *serveConfig, ms *metrics.Metrics, lc *lifecycle) fleet.Sink {
	opts := []webhook.Option{webhook.WithLogger(cfg.logger), webhook.WithSource(cfg.replicaID)}
	if ms != nil {
		opts = append(opts, webhook.WithCounter(ms))
	}
	n := webhook.New(cfg.webhooks, opts...)
	lc.run(n.Run)
	cfg.logger.Info("webhooks on", "receivers", len(cfg.webhooks))
	return func(events []fleet.Event) {
		sink(events)
		n.Notify(events)
	}
}

// sameWebhook reports whether a and b are the same webhook, wherever in
// the file.
func sameWebhook(a, b policy.Webhook) bool {
	return a.URL == b.URL && a.SecretEnv == b.SecretEnv && slices.Equal(a.Events, b.Events)
}

// webhookReceivers reads the secrets of the policy's webhooks from env; an
// unset one is an error naming the file and line of its webhook.
func webhookReceivers(hooks []policy.Webhook, env func(string) string) ([]webhook.Receiver, error) {
	var out []webhook.Receiver
	for _, h := range hooks {
		secret := env(h.SecretEnv)
		if secret == "" {
			return nil, fmt.Errorf("%s:%d: webhooks: secret_env %s is not set (it holds the secret that signs the events)", h.File, h.Line, h.SecretEnv)
		}
		out = append(out, webhook.Receiver{URL: h.URL, Secret: []byte(secret), Events: h.Events})
	}
	return out, nil
}

// warnWebhookChanges wraps set, the reloader's, to log that a reloaded
// policy's webhooks take effect only at the next start (the notifier and
// its queues are made once).
func warnWebhookChanges(cfg *serveConfig, set func(*policy.Policy)) func(*policy.Policy) {
	return func(p *policy.Policy) {
		if !slices.EqualFunc(p.Webhooks, cfg.policy.Webhooks, sameWebhook) {
			cfg.logger.Warn("the policy file's webhooks changed: they take effect at the next start", "webhooks", len(p.Webhooks))
		}
		set(p)
	}
}
