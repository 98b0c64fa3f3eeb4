package policy

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Caps are global limits an operator sets through the environment, on top
// of every profile (seed 004's PLANDEX_* variables under our prefix).
type Caps struct {
	// MaxAttempts caps the attempts of any strategy (POLICYD_MAX_RETRY_ATTEMPTS; 0: no cap).
	MaxAttempts int
	// MaxDelay caps any delay (POLICYD_MAX_RETRY_DELAY; 0: no cap).
	MaxDelay time.Duration
	// MaxRetryAfter lowers every strategy's server delay ceiling
	// (POLICYD_MAX_PROVIDER_RETRY_AFTER; 0: the profiles' own ceilings).
	MaxRetryAfter time.Duration
	// RetryIrreversible allows retrying irreversible operations (POLICYD_RETRY_IRREVERSIBLE).
	RetryIrreversible bool
}

// Environment variables read by CapsFromEnv.
const (
	EnvMaxRetryAttempts      = "POLICYD_MAX_RETRY_ATTEMPTS"
	EnvMaxRetryDelay         = "POLICYD_MAX_RETRY_DELAY"
	EnvMaxProviderRetryAfter = "POLICYD_MAX_PROVIDER_RETRY_AFTER"
	EnvRetryIrreversible     = "POLICYD_RETRY_IRREVERSIBLE"
)

// CapsFromEnv reads the caps. Durations are Go durations ("30s") or plain
// milliseconds ("30000", as seed 004's *_MS variables were).
func CapsFromEnv(env func(string) string) (Caps, error) {
	var c Caps
	if v := strings.TrimSpace(env(EnvMaxRetryAttempts)); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return c, fmt.Errorf("%s: %q is not a non-negative whole number", EnvMaxRetryAttempts, v)
		}
		c.MaxAttempts = n
	}
	var err error
	if c.MaxDelay, err = envDuration(env, EnvMaxRetryDelay); err != nil {
		return c, err
	}
	if c.MaxRetryAfter, err = envDuration(env, EnvMaxProviderRetryAfter); err != nil {
		return c, err
	}
	if v := strings.TrimSpace(env(EnvRetryIrreversible)); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return c, fmt.Errorf("%s: %q is not true or false", EnvRetryIrreversible, v)
		}
		c.RetryIrreversible = b
	}
	return c, nil
}

func envDuration(env func(string) string, name string) (time.Duration, error) {
	v := strings.TrimSpace(env(name))
	if v == "" {
		return 0, nil
	}
	if ms, err := strconv.ParseInt(v, 10, 64); err == nil && ms >= 0 {
		return time.Duration(ms) * time.Millisecond, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s: %q is not a duration (want e.g. 30s, or milliseconds)", name, v)
	}
	return d, nil
}
