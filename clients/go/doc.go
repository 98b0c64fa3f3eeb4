// Package policyd is the Go client of policyd, the retry-policy daemon. It
// owns the retry loop an agent wraps around a call that may fail: run the
// call; on failure turn the Go error into a [Failure], ask policyd what to do
// (NextDelay), then wait (cancellably, never past the caller's deadline),
// stop with the original error and the decision's reason, or hand the
// fallback hint to the caller. With the journal on, every attempt and the
// outcome are recorded in policyd's RetryContext journal.
//
// The common case is a few lines:
//
//	client, err := policyd.Dial("") // POLICYD_ADDR, else 127.0.0.1:7433
//	...
//	err = client.Do(ctx, policyd.Call{Provider: "openai", Operation: "chat"},
//		func(ctx context.Context, attempt int) error {
//			resp, err := http.DefaultClient.Do(req.WithContext(ctx))
//			if err != nil {
//				return err
//			}
//			return policyd.CheckResponse(resp) // a non-2xx becomes an *HTTPError
//		})
//
// For an SDK that takes an *http.Client (openai-go, anthropic-sdk-go),
// [Client.HTTPClient] runs every request it makes the same way, with no
// change at the call sites (turn the SDK's own retries off):
//
//	openai.NewClient(option.WithHTTPClient(client.HTTPClient(policyd.TransportOptions{Provider: "openai"})), option.WithMaxRetries(0))
//
// The success path makes no RPC at all (except finishing a journaled context
// that saw failures). The client fails open: when policyd is unreachable or
// slower than the daemon timeout (WithDaemonTimeout), it decides with a small
// built-in policy ([FailOpenPolicy]: connection errors, timeouts, 408, 429
// and 5xx, capped exponential backoff with full jitter, Retry-After
// honoured) and warns once
// per outage, so a daemon outage never becomes an agent outage.
//
// With policyd's fleet memory on, a [Client] also keeps one background
// Coordinate stream and gates every first attempt of a call that names a
// provider against the assignments policyd pushes down it (a map lookup,
// no RPC): the attempt goes, waits out a shared hold, falls back, or stops
// before it is sent ([ErrNotAdmitted]) while the fleet's breaker is open
// or the key stopped. [WithFleetGate] turns it off; [Client.ObserveRateLimits]
// hands over a success's rate-limit headers.
//
// Against a daemon with --auth-tokens or TLS, [WithToken], [WithTLS] and
// [WithClientCert] (or POLICYD_TOKEN, POLICYD_TLS_CA, POLICYD_TLS_CERT and
// POLICYD_TLS_KEY) supply the credentials. A daemon that answers
// UNAUTHENTICATED is a configuration error, not an outage: the client does
// not fail open on it but returns an error matching [ErrUnauthenticated].
//
// [FailureFromError] is the heart of it and is exported so callers can see
// what policyd is told: it reads [*HTTPError], *url.Error, net.Error,
// *net.DNSError, syscall.Errno, io.ErrUnexpectedEOF, context errors, gRPC
// status errors, [*CodeError] and [*StreamError], anywhere in the error's
// Unwrap chain.
package policyd
