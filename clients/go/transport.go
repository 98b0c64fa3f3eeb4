package policyd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// The transport (docs/clients.md, "The transport"): an http.RoundTripper
// that runs every request of an SDK (openai-go, anthropic-sdk-go, any
// client that takes an *http.Client) as Do runs a call, with the SDK's own
// retries turned off. A success passes through untouched, streaming
// included, with no RPC; a failure is decided as Do decides one, and the
// SDK sees the success of a retry, or the last response unchanged.

// TransportOptions configure a transport; every field is optional.
type TransportOptions struct {
	// Provider, e.g. "openai"; empty: from the request's host (api.openai.com
	// is "openai", *.openai.azure.com "azure", ...), else its path
	// (/v1/messages is "anthropic", /chat/completions and /responses
	// "openai"), else "unknown".
	Provider string
	// Model, e.g. "gpt-4o"; empty: the JSON body's "model", else a
	// Gemini-style path's models/{model}:method.
	Model string
	// KeyID labels the credential the SDK sends (see Call.KeyID); never
	// the key itself.
	KeyID string
	// Operation is what policyd reads the request as; empty: from the
	// path (/chat/completions is "chat", /messages "messages", /responses
	// "responses", /embeddings "embed", ...), else none, and the method
	// decides whether the request may be repeated (GET may, POST may not).
	Operation string
	// Profile names the policyd profile; empty: the client's.
	Profile string
	// Class is the requests' priority class; empty: ClassInteractive.
	Class Class
	// Agent and Labels go to the journal, as Call's.
	Agent  string
	Labels map[string]string
}

// InputTokensHeader is the request header that gives a request's exact
// input tokens (a whole number), e.g. through an SDK's per-request header
// option; the transport strips it before the request is sent. Without it
// the transport estimates ceil(body bytes / 4): a token is about four
// bytes of English text, the providers' own rule of thumb.
const InputTokensHeader = "X-Policyd-Input-Tokens"

// maxInspectedBody is the largest request body the transport reads a
// model and a token estimate from; a larger one passes as it comes.
const maxInspectedBody = 8 << 20

// HTTPClient returns an *http.Client whose transport runs every request
// under policyd's retry policy and fleet gate (RoundTripper over
// http.DefaultTransport), e.g.
//
//	openai.NewClient(option.WithHTTPClient(pd.HTTPClient(policyd.TransportOptions{Provider: "openai"})), option.WithMaxRetries(0))
//
// Turn the SDK's own retries off: policyd decides.
func (c *Client) HTTPClient(opts TransportOptions) *http.Client {
	return &http.Client{Transport: c.RoundTripper(nil, opts)}
}

// RoundTripper returns a transport that sends each request through base
// (nil: http.DefaultTransport) as Do runs a call:
//
//   - the fleet gate admits its first attempt, or it is not sent and
//     RoundTrip returns the *Error Do would (errors.Is(err, ErrNotAdmitted));
//   - a response below 400 is returned untouched, streaming included, and
//     no RPC is made; its rate-limit headers (as every response's) go to
//     the fleet (ObserveRateLimits), and the input tokens its body says
//     the call used are read as the SDK reads it and reported with the
//     call's estimate;
//   - a failure (a status of 400 or more, or no response) is decided as Do
//     decides one: a retry resends the same body after policyd's delay;
//     on a stop the last response is returned unchanged (its body as it
//     came), so that the SDK raises its own error for it, or, when there
//     was no response, the *Error. A FALL_BACK stops: the transport cannot
//     change the request's provider.
//
// A body larger than 8 MiB without GetBody cannot be sent again: such a
// request is irreversible and not retried. A streamed response cut after
// its first byte is counted as a failure for the fleet, not retried. The
// request's context bounds everything, as Do's does.
func (c *Client) RoundTripper(base http.RoundTripper, opts TransportOptions) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{c: c, base: base, opts: opts}
}

type transport struct {
	c    *Client
	base http.RoundTripper
	opts TransportOptions
}

// RoundTrip implements http.RoundTripper.
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	body, err := readRequestBody(req)
	if err != nil {
		return nil, err
	}
	defer body.release()
	tokens, err := inputTokens(req, body)
	if err != nil {
		return nil, err
	}
	call := t.call(req, body, tokens)
	body.returnBuffer() // the model and size are read
	tg, gated := targetOf(call)

	var ok, last *http.Response // the success; the last failed response, its body restored
	var sent *url.Error         // the last attempt's transport error, as the transport wrapped it
	err = t.c.do(req.Context(), call, func(ctx context.Context, attempt int) error {
		closeResponse(last)
		last, sent = nil, nil
		out := outgoing(ctx, req)
		var berr error
		if out.Body, out.GetBody, berr = body.forAttempt(req, attempt); berr != nil {
			return berr
		}
		resp, err := t.base.RoundTrip(out)
		if err != nil {
			// As http.Client reports it, so that a bare io.EOF (the
			// server closed the connection) reads as a dropped connection.
			sent = &url.Error{Op: urlOp(req.Method), URL: out.URL.Redacted(), Err: err}
			return sent
		}
		if gated {
			t.c.observeRateLimits(tg, resp.Header)
		}
		if resp.StatusCode < 400 {
			ok = resp
			return nil
		}
		e := &HTTPError{Response: resp}
		e.Body, resp.Body = readErrorBody(resp.Body)
		last = resp
		return e
	}, true)
	if err == nil {
		if gated {
			t.c.track(req.Context(), tg, ok, min(call.inputTokens(), maxCallInputTokens))
		}
		return ok, nil
	}
	var pe *Error
	if !errors.As(err, &pe) {
		closeResponse(last)
		return nil, err
	}
	if last != nil && !pe.gated && pe.refusal == nil && pe.ctxErr == nil {
		return last, nil // STOP or FALL_BACK: the SDK raises its own error for it
	}
	closeResponse(last)
	if sent != nil && pe.Err == error(sent) {
		e := *pe
		e.Err = sent.Err // http.Client wraps the error in a *url.Error of its own
		return nil, &e
	}
	return nil, pe
}

// call is the Call a request runs as.
func (t *transport) call(req *http.Request, body *requestBody, tokens int) Call {
	o := t.opts
	path := requestPath(req)
	call := Call{
		Provider: o.Provider, Model: o.Model, KeyID: o.KeyID, Operation: o.Operation, Method: req.Method,
		Profile: o.Profile, Class: o.Class, Agent: o.Agent, Labels: o.Labels, InputTokens: tokens,
	}
	if call.Provider == "" {
		host := ""
		if req.URL != nil {
			host = req.URL.Hostname()
		}
		call.Provider = providerOf(host, path)
	}
	if call.Model == "" {
		call.Model = modelOf(body.inspected(), path)
	}
	if call.Operation == "" {
		call.Operation = operationOf(path)
	}
	if !body.replayable() {
		call.Safety = SafetyIrreversible
	}
	return call
}

// inputTokens is the request's input tokens: InputTokensHeader's count,
// else ceil(body bytes / 4).
func inputTokens(req *http.Request, body *requestBody) (int, error) {
	if v := req.Header.Get(InputTokensHeader); v != "" {
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 31)
		if err != nil {
			body.release()
			return 0, fmt.Errorf("policyd: header %s: %q is not a whole number of tokens", InputTokensHeader, v)
		}
		return int(n), nil
	}
	return int((body.size(req) + 3) / 4), nil
}

// outgoing is the request an attempt sends: req under ctx, without
// InputTokensHeader. A shallow copy shares req's headers, which nothing
// downstream changes; a deep one (a new header map) only when the header
// must go.
func outgoing(ctx context.Context, req *http.Request) *http.Request {
	if _, ok := req.Header[InputTokensHeader]; !ok {
		return req.WithContext(ctx)
	}
	out := req.Clone(ctx)
	out.Header.Del(InputTokensHeader)
	return out
}

// urlOp is the Op http.Client names a method by in its *url.Error.
func urlOp(method string) string {
	if method == "" {
		return "Get"
	}
	return method[:1] + strings.ToLower(method[1:])
}

// readErrorBody reads an error response's body, whole up to 64 KiB (all
// policyd looks at), and returns what it read and the body as it came.
func readErrorBody(b io.ReadCloser) ([]byte, io.ReadCloser) {
	if b == nil || b == http.NoBody {
		return nil, b
	}
	head, err := io.ReadAll(io.LimitReader(b, maxBodyBytes))
	if err != nil && len(head) == 0 {
		return nil, b
	}
	return head, restoredBody{Reader: io.MultiReader(bytes.NewReader(head), b), Closer: b}
}

// restoredBody is a response body whose start was read, given back whole.
type restoredBody struct {
	io.Reader
	io.Closer
}

// closeResponse drains a little of resp's body, so that its connection can
// be reused, and closes it.
func closeResponse(resp *http.Response) {
	if resp == nil || resp.Body == nil {
		return
	}
	_, _ = io.CopyN(io.Discard, resp.Body, 4<<10)
	resp.Body.Close()
}
