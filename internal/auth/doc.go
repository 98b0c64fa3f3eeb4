// Package auth owns who a caller of policyd is: the bearer tokens file that
// maps tokens to tenants, the client certificates of mutual TLS, the
// server's TLS configuration, and the tenant carried in a call's context.
//
// A caller is authenticated by the first of these that is configured:
//
//   - a tokens file: the call must carry "authorization: Bearer TOKEN"; the
//     token's line names the tenant. A missing or unknown token is
//     ErrUnauthenticated. Tokens are compared as SHA-256 digests in constant
//     time against every entry and never appear in errors or logs.
//   - mutual TLS without a tokens file: the tenant is the verified client
//     certificate's subject common name (CN).
//   - neither: no authentication; every caller is the empty tenant "".
//
// With both a tokens file and mutual TLS, the certificate only admits the
// connection and the token names the tenant.
package auth
