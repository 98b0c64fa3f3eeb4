package policyd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
)

// requestBody is a request's body as the transport keeps it, to read its
// model and size and to send it again.
type requestBody struct {
	none    bool   // no body at all
	buf     []byte // the whole body, or (too large) its first maxInspectedBody+1 bytes
	whole   bool
	rest    io.ReadCloser // not whole: the body past buf, for the first attempt
	taken   bool          // rest was handed to an attempt, or closed
	getBody func() (io.ReadCloser, error)
	// lent: buf is a pooled buffer, to read the model and size from, and
	// every attempt's body comes from getBody (returnBuffer gives it back).
	lent bool
}

// readBuffers lend the buffers a body with GetBody is read into: its
// bytes are needed only until its model and size are read, since each
// attempt sends GetBody's copy, so the buffer serves the next request.
var readBuffers = sync.Pool{New: func() any { return new([]byte) }}

// maxLentBuffer is the largest buffer given back to readBuffers: a rare
// large body's is left to the collector rather than kept.
const maxLentBuffer = 64 << 10

// readRequestBody reads req's body, whole up to maxInspectedBody.
func readRequestBody(req *http.Request) (*requestBody, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return &requestBody{none: true}, nil
	}
	var dst []byte
	lend := req.GetBody != nil
	if lend {
		dst = *readBuffers.Get().(*[]byte)
	}
	buf, err := readUpTo(dst, req.Body, req.ContentLength, maxInspectedBody+1)
	if err != nil {
		req.Body.Close()
		return nil, fmt.Errorf("policyd: reading the request body: %w", err)
	}
	if len(buf) <= maxInspectedBody {
		req.Body.Close()
		return &requestBody{buf: buf, whole: true, lent: lend, getBody: req.GetBody}, nil
	}
	return &requestBody{buf: buf, rest: req.Body, getBody: req.GetBody}, nil
}

// returnBuffer gives a lent buffer back, once the model and size are read.
func (b *requestBody) returnBuffer() {
	if !b.lent || b.buf == nil {
		return
	}
	if cap(b.buf) <= maxLentBuffer {
		buf := b.buf[:0]
		readBuffers.Put(&buf)
	}
	b.buf = nil
}

// readUpTo reads r to its end or to limit bytes, appended to dst[:0]: a
// buffer with room for size (a Content-Length; unknown when negative) and
// a byte more, so that a body of the size it says ends without growing.
func readUpTo(dst []byte, r io.Reader, size int64, limit int) ([]byte, error) {
	buf := slices.Grow(dst[:0], int(min(max(size, 0), int64(limit-1))+1))
	for len(buf) < limit {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(cap(buf), limit-len(buf)))
		}
		n, err := r.Read(buf[len(buf):min(cap(buf), limit)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}

// forAttempt is the body (and GetBody) of attempt number attempt.
func (b *requestBody) forAttempt(req *http.Request, attempt int) (io.ReadCloser, func() (io.ReadCloser, error), error) {
	switch {
	case b.none:
		return req.Body, nil, nil
	case b.lent:
		rc, err := b.getBody()
		return rc, b.getBody, err
	case b.whole:
		get := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b.buf)), nil }
		rc, _ := get()
		return rc, get, nil
	case attempt == 1 && !b.taken:
		b.taken = true
		return restoredBody{Reader: io.MultiReader(bytes.NewReader(b.buf), b.rest), Closer: b.rest}, b.getBody, nil
	case b.getBody == nil:
		return nil, nil, errors.New("policyd: the request body cannot be sent again (larger than 8 MiB, without GetBody)")
	}
	rc, err := b.getBody()
	return rc, b.getBody, err
}

// replayable says whether the body can be sent again.
func (b *requestBody) replayable() bool { return b.none || b.whole || b.getBody != nil }

// inspected is the whole body, nil when it was too large to read.
func (b *requestBody) inspected() []byte {
	if !b.whole {
		return nil
	}
	return b.buf
}

// size is the body's length in bytes: what was read, else the request's
// Content-Length, else (unknown) at least what was read.
func (b *requestBody) size(req *http.Request) int64 {
	if !b.whole && req.ContentLength > int64(len(b.buf)) {
		return req.ContentLength
	}
	return int64(len(b.buf))
}

// release closes the rest of a body no attempt took.
func (b *requestBody) release() {
	if b.rest != nil && !b.taken {
		b.taken = true
		b.rest.Close()
	}
}

// track counts a success's body in flight on t until it is read to its
// end or closed, and reads from it, as the SDK reads it, what the call
// used (usageScanner): counted once, with estimate, the input tokens the
// succeeding attempt was counted at, as soon as the body says them; the
// output tokens when the body ends (read to its end or closed), the last
// count it said. A body that breaks off before its end
// (a stream cut after its first byte) is not retried: the caller sees the
// error, and the fleet gate counts a failed attempt. A 101's body (the
// upgraded connection) and an empty one pass as they are.
func (c *Client) track(ctx context.Context, t target, resp *http.Response, estimate uint64) {
	if c.gate == nil || resp.Body == nil || resp.Body == http.NoBody {
		return
	}
	if _, upgraded := resp.Body.(io.Writer); upgraded {
		return
	}
	c.gate.flight(c.cfg.clock.Now(), t, true)
	resp.Body = &trackedBody{ReadCloser: resp.Body, c: c, ctx: ctx, t: t, estimate: estimate}
}

// trackedBody is a success's body counted in flight.
type trackedBody struct {
	io.ReadCloser
	c        *Client
	ctx      context.Context
	t        target
	done     atomic.Bool
	estimate uint64       // the call's input tokens as the gate counted them
	usage    usageScanner // touched by Read only
	counted  bool         // the input count went to the gate
	// output is the last output count read, plus one (0: none yet): end
	// may run in Close, on another goroutine than Read.
	output atomic.Uint64
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.usage.scan(p[:n])
		if used, ok := b.usage.found(); ok && !b.counted {
			b.counted = true
			b.c.gate.recordUsage(b.c.cfg.clock.Now(), b.t, used, b.estimate)
		}
		if out, ok := b.usage.foundOutput(); ok {
			b.output.Store(out + 1)
		}
	}
	if err != nil {
		b.end(err)
	}
	return n, err
}

func (b *trackedBody) Close() error {
	b.end(nil)
	return b.ReadCloser.Close()
}

// end counts the body out of flight, once; err is the read error that
// ended it (nil: closed, io.EOF: read to its end).
func (b *trackedBody) end(err error) {
	if !b.done.CompareAndSwap(false, true) {
		return
	}
	c := b.c
	now := c.cfg.clock.Now()
	c.gate.flight(now, b.t, false)
	if err == nil || err == io.EOF {
		// Read to its end, or closed by the caller: the last output count
		// it said is the call's.
		if out := b.output.Load(); out > 0 {
			c.gate.recordOutput(now, b.t, out-1)
		}
		return
	}
	if b.ctx.Err() != nil {
		return // cancelled by the caller: broken off, its count not the call's
	}
	c.gate.record(now, b.t, false)
	if breakerCounts(failOpenClassify(FailureFromError(err)).FailureType) {
		c.gate.countFailedLocally(now, b.t)
	}
	c.cfg.logger.Debug("policyd: a response broke off after its first byte; not retried", "target", b.t.String(), "error", err)
}
