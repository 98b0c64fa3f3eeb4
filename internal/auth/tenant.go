package auth

import (
	"context"
	"fmt"
)

// MaxTenantLen bounds a tenant name; the journal stores at most 256.
const MaxTenantLen = 64

type tenantKey struct{}

// WithTenant returns ctx carrying the authenticated tenant.
func WithTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, tenantKey{}, tenant)
}

// TenantFrom returns the tenant WithTenant put into ctx, or "" (the tenant of
// a daemon without authentication).
func TenantFrom(ctx context.Context) string {
	t, _ := ctx.Value(tenantKey{}).(string)
	return t
}

type identityKey struct{}

// WithIdentity returns ctx carrying the caller's authenticated identity:
// which credential it presented (IdentityFrom).
func WithIdentity(ctx context.Context, identity string) context.Context {
	return context.WithValue(ctx, identityKey{}, identity)
}

// IdentityFrom returns the identity WithIdentity put into ctx: "token:"
// and the first 12 hex digits of the bearer token's SHA-256, or "cert:"
// and the client certificate's subject CN and serial number; "" without
// authentication. It names a credential without revealing it, so that the
// fleet can tell callers apart beyond the client ids they choose, and
// events can say who caused them.
func IdentityFrom(ctx context.Context) string {
	id, _ := ctx.Value(identityKey{}).(string)
	return id
}

// ValidateTenant checks a tenant name: 1 to MaxTenantLen characters of
// letters, digits and "_.-@", so that it is safe in logs, SQL filters and
// file names alike.
func ValidateTenant(t string) error {
	if t == "" {
		return fmt.Errorf("tenant name is empty")
	}
	if len(t) > MaxTenantLen {
		return fmt.Errorf("tenant name is %d bytes, at most %d allowed", len(t), MaxTenantLen)
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-' || c == '@') {
			return fmt.Errorf("tenant name %q: want only letters, digits and _.-@", t)
		}
	}
	return nil
}
