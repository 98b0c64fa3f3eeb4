package fleet

import (
	"fmt"
	"strings"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

// Scope is the failure domain a bucket stands for.
type Scope uint8

const (
	// ScopeRateLimit: rate limits and quotas, set per key and model.
	ScopeRateLimit Scope = iota + 1
	// ScopeAvailability: overload, server errors, timeouts and broken
	// connections, which hit a provider's model whatever the key.
	ScopeAvailability
	// ScopeAuth: a credential that is wrong or not allowed.
	ScopeAuth
)

var scopeNames = map[Scope]string{ScopeRateLimit: "rate_limit", ScopeAvailability: "availability", ScopeAuth: "auth"}

func (s Scope) String() string { return scopeNames[s] }

// ParseScope reads "rate_limit", "availability" or "auth".
func ParseScope(name string) (Scope, error) {
	for s, n := range scopeNames {
		if n == name {
			return s, nil
		}
	}
	return 0, fmt.Errorf("%q is not a fleet scope (want rate_limit, availability or auth)", name)
}

// ScopeOf is the scope of a failure type, and false for types the fleet does
// not track (a malformed request says nothing about the next agent's).
func ScopeOf(t policydv1.FailureType) (Scope, bool) {
	switch t {
	case policydv1.FailureType_FAILURE_TYPE_RATE_LIMIT, policydv1.FailureType_FAILURE_TYPE_QUOTA_EXHAUSTED:
		return ScopeRateLimit, true
	case policydv1.FailureType_FAILURE_TYPE_OVERLOADED, policydv1.FailureType_FAILURE_TYPE_SERVER_ERROR,
		policydv1.FailureType_FAILURE_TYPE_TIMEOUT, policydv1.FailureType_FAILURE_TYPE_CONNECTION_ERROR,
		policydv1.FailureType_FAILURE_TYPE_STREAM_INTERRUPTED:
		return ScopeAvailability, true
	case policydv1.FailureType_FAILURE_TYPE_AUTH_INVALID, policydv1.FailureType_FAILURE_TYPE_PERMISSION_DENIED:
		return ScopeAuth, true
	}
	return 0, false
}

// Fields are the parts besides the tenant that name a scope's buckets. The
// tenant always does: one tenant's failures never act on another's agents.
type Fields struct{ Provider, Model, Key bool }

// Scopes says which fields name each scope's buckets; a policy file can
// narrow a scope (drop a field: one bucket for every model) or widen it.
type Scopes map[Scope]Fields

// DefaultScopes match the providers' failure domains: limits are set per key
// (organisation or project) and model, outages hit a model whatever the key,
// a credential fails for every model.
func DefaultScopes() Scopes {
	return Scopes{
		ScopeRateLimit:    {Provider: true, Model: true, Key: true},
		ScopeAvailability: {Provider: true, Model: true},
		ScopeAuth:         {Provider: true, Key: true},
	}
}

// Key names a bucket. Fields outside the scope are empty.
type Key struct {
	Scope                          Scope
	Tenant, Provider, Model, KeyID string
}

// Target is what a failure or a fallback target is about.
type Target struct{ Tenant, Provider, Model, KeyID string }

// key is t's bucket in scope s.
func (sc Scopes) key(s Scope, t Target) Key {
	f := sc[s]
	k := Key{Scope: s, Tenant: t.Tenant}
	if f.Provider {
		k.Provider = strings.ToLower(t.Provider)
	}
	if f.Model {
		k.Model = t.Model
	}
	if f.Key {
		k.KeyID = t.KeyID
	}
	return k
}

// String is the bucket's name as decisions and FleetService show it, e.g.
// "rate_limit:openai/gpt-4o@prod-key" or "availability:openai/gpt-4o". The
// tenant is not part of it: a caller only sees its own tenant's buckets.
func (k Key) String() string {
	var b strings.Builder
	b.WriteString(k.Scope.String())
	b.WriteByte(':')
	b.WriteString(k.Provider)
	if k.Model != "" {
		b.WriteByte('/')
		b.WriteString(k.Model)
	}
	if k.KeyID != "" {
		b.WriteByte('@')
		b.WriteString(k.KeyID)
	}
	return b.String()
}
