package policyd

import (
	"fmt"
	"io"
	"net/http"
	"strings"
)

// HTTPError is a failed HTTP response as an error, so that an operation can
// return it and FailureFromError can read its status, headers and body.
// CheckResponse makes one from a response.
type HTTPError struct {
	// Response is the response; its Body has been read into Body and closed.
	Response *http.Response
	// Body is the start of the response body (CheckResponse reads at most
	// 64 KiB, all policyd looks at).
	Body []byte
}

// CheckResponse returns nil for a response with a status below 400 and
// leaves it untouched. Otherwise it reads the first 64 KiB of the body,
// closes it and returns an *HTTPError, so an operation can end with
//
//	return policyd.CheckResponse(resp)
//
// A body that breaks off while being read is kept as far as it arrived.
func CheckResponse(resp *http.Response) error {
	if resp == nil || resp.StatusCode < 400 {
		return nil
	}
	return NewHTTPError(resp)
}

// NewHTTPError reads the first 64 KiB of resp's body, closes it, and
// returns the response as an *HTTPError whatever its status.
func NewHTTPError(resp *http.Response) *HTTPError {
	e := &HTTPError{Response: resp}
	if resp != nil && resp.Body != nil {
		e.Body, _ = io.ReadAll(io.LimitReader(resp.Body, maxBodyBytes))
		resp.Body.Close()
	}
	return e
}

// Error returns e.g. `POST http://host/v1/chat: HTTP 429 Too Many Requests`;
// the URL's query and credentials are left out.
func (e *HTTPError) Error() string {
	var b strings.Builder
	if m := e.method(); m != "" {
		b.WriteString(m)
		b.WriteByte(' ')
	}
	if e.Response != nil && e.Response.Request != nil && e.Response.Request.URL != nil {
		u := *e.Response.Request.URL
		u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
		b.WriteString(u.String())
		b.WriteString(": ")
	}
	status := "no response"
	if e.Response != nil {
		status = e.Response.Status
		if status == "" {
			status = fmt.Sprintf("%d %s", e.Response.StatusCode, http.StatusText(e.Response.StatusCode))
		}
	}
	b.WriteString("HTTP ")
	b.WriteString(status)
	return b.String()
}

// StatusCode returns the response's status code (0 without a response).
func (e *HTTPError) StatusCode() int { return e.status() }

func (e *HTTPError) status() int {
	if e.Response == nil {
		return 0
	}
	return e.Response.StatusCode
}

func (e *HTTPError) method() string {
	if e.Response == nil || e.Response.Request == nil {
		return ""
	}
	m := e.Response.Request.Method
	if m == "" {
		m = http.MethodGet
	}
	return m
}

// headers returns the response headers, names in lower case, repeated
// values joined with ", ".
func (e *HTTPError) headers() map[string]string {
	if e.Response == nil || len(e.Response.Header) == 0 {
		return nil
	}
	h := make(map[string]string, len(e.Response.Header))
	for k, v := range e.Response.Header {
		h[strings.ToLower(k)] = strings.Join(v, ", ")
	}
	return h
}
