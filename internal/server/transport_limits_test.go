package server

import (
	"bytes"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/fleet"
	"github.com/policyd/policyd/internal/policy"
)

func TestRateLimitChargesEveryStreamMessage(t *testing.T) {
	t.Parallel()
	ps := NewPolicyServer(policy.Builtin(), WithFleet(fleet.New(fleet.Defaults())))
	// A burst of 5, refilled every 10 s: the stream's opening and four
	// reports pass, the fifth report ends the stream.
	conn := dialT(t, serveSecured(t, ps, Security{Auth: tokenAuth(t), RateLimit: 0.1, RateBurst: 5}), insecure.NewCredentials())
	ctx := as(testContext(t), tokenAcme)
	s, err := policydv1.NewFleetServiceClient(conn).Coordinate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	usage := []*policydv1.BucketUsage{{Target: gpt4o, Elapsed: durationpb.New(time.Second), Admitted: 1}}
	if err := s.Send(&policydv1.CoordinateRequest{ClientId: "a", Usage: usage}); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if err := s.Send(&policydv1.CoordinateRequest{Usage: usage}); err != nil {
			break // the server ended the stream
		}
	}
	var rerr error
	for rerr == nil {
		_, rerr = s.Recv()
	}
	if status.Code(rerr) != codes.ResourceExhausted {
		t.Fatalf("stream ended with %v, want RESOURCE_EXHAUSTED", rerr)
	}
	if p := s.Trailer().Get("grpc-retry-pushback-ms"); len(p) != 1 {
		t.Errorf("no pushback trailer: %v", s.Trailer())
	}
}

func TestHeaderListIsBounded(t *testing.T) {
	t.Parallel()
	conn := dialT(t, serveSecured(t, builtinServer(), Security{Auth: tokenAuth(t), MaxHeaderBytes: DefaultMaxHeaderBytes}), insecure.NewCredentials())
	client := policydv1.NewPolicyServiceClient(conn)
	ctx := metadata.AppendToOutgoingContext(as(testContext(t), tokenAcme), "x-junk", strings.Repeat("j", 2*DefaultMaxHeaderBytes))
	_, err := client.Classify(ctx, okFailure)
	// grpc-go's client honours the bound the server advertises, and
	// refuses to send the call (an INTERNAL of its own).
	if err == nil || !strings.Contains(err.Error(), "header list size") {
		t.Fatalf("a call with %d bytes of metadata: %v, want it refused for its header list size", 2*DefaultMaxHeaderBytes, err)
	}
	// The connection still serves calls of a normal size.
	if _, err := client.Classify(as(testContext(t), tokenAcme), okFailure); err != nil {
		t.Fatalf("a normal call after it: %v", err)
	}
}

func TestReportRateIsPerTenant(t *testing.T) {
	t.Parallel()
	p, err := policy.Parse([]byte("fleet:\n  reports_per_second: 3\n"), "limits.yaml", policy.Caps{})
	if err != nil {
		t.Fatal(err)
	}
	f := fleet.New(p.Fleet, fleet.WithClock(func() time.Time { return time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC) }))
	ps := NewPolicyServer(p, WithFleet(f))
	fc := policydv1.NewFleetServiceClient(dialT(t, serveSecured(t, ps, Security{Auth: tokenAuth(t)}), insecure.NewCredentials()))
	usage := []*policydv1.BucketUsage{{Target: gpt4o, Elapsed: durationpb.New(time.Second), Admitted: 1}}
	flood, err := fc.Coordinate(as(testContext(t), tokenBeta))
	if err != nil {
		t.Fatal(err)
	}
	_ = flood.Send(&policydv1.CoordinateRequest{ClientId: "flood", Usage: usage})
	for range 5 {
		if flood.Send(&policydv1.CoordinateRequest{Usage: usage}) != nil {
			break
		}
	}
	var rerr error
	for rerr == nil {
		_, rerr = flood.Recv()
	}
	if status.Code(rerr) != codes.ResourceExhausted || !strings.Contains(status.Convert(rerr).Message(), "reports_per_second") {
		t.Fatalf("the flooding tenant's stream: %v, want RESOURCE_EXHAUSTED naming reports_per_second", rerr)
	}
	// The other tenant reports as usual.
	ok, err := fc.Coordinate(as(testContext(t), tokenAcme))
	if err != nil {
		t.Fatal(err)
	}
	_ = ok.Send(&policydv1.CoordinateRequest{ClientId: "calm", Usage: usage})
	if _, err := ok.Recv(); err != nil {
		t.Fatalf("the other tenant's stream: %v", err)
	}
}

// The bound holds against a client that ignores what the server
// advertises: a raw HTTP/2 client's call with metadata under the bound is
// answered, one with twice the bound is refused (the stream or the
// connection reset) without being decoded or kept.
func TestHeaderListBoundHoldsAgainstARawClient(t *testing.T) {
	t.Parallel()
	addr := serveSecured(t, builtinServer(), Security{Auth: tokenAuth(t), MaxHeaderBytes: DefaultMaxHeaderBytes})
	if !rawCallAnswered(t, addr, DefaultMaxHeaderBytes/2) {
		t.Fatalf("a call with %d bytes of metadata was not answered", DefaultMaxHeaderBytes/2)
	}
	if rawCallAnswered(t, addr, 2*DefaultMaxHeaderBytes) {
		t.Fatalf("a call with %d bytes of metadata was answered, want it refused", 2*DefaultMaxHeaderBytes)
	}
}

// rawCallAnswered sends a Classify call's headers with junk bytes of
// metadata over a raw HTTP/2 connection (ignoring the server's settings),
// and says whether the server answered it (a HEADERS frame: even an
// UNAUTHENTICATED answer decoded the headers).
func rawCallAnswered(t *testing.T, addr string, junk int) bool {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: "/policyd.v1.PolicyService/Classify"}, {Name: ":authority", Value: addr},
		{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
		{Name: "x-junk", Value: strings.Repeat("j", junk)},
	} {
		_ = enc.WriteField(f)
	}
	// HEADERS, then CONTINUATIONs, each within the default frame size; a
	// write the server's reset cuts short is a refusal too.
	const frame = 16 << 10
	b := block.Bytes()
	n := min(frame, len(b))
	if fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:n], EndHeaders: n == len(b)}) != nil {
		return false
	}
	for b = b[n:]; len(b) > 0; b = b[n:] {
		n = min(frame, len(b))
		if fr.WriteContinuation(1, n == len(b), b[:n]) != nil {
			return false
		}
	}
	// An empty request message ends the call.
	if fr.WriteData(1, true, make([]byte, 5)) != nil {
		return false
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return false // the connection closed
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if v, ok := f.Value(http2.SettingMaxHeaderListSize); ok && v != DefaultMaxHeaderBytes {
				t.Errorf("advertised header list size %d, want %d", v, DefaultMaxHeaderBytes)
			}
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == 1 {
				return false
			}
		case *http2.GoAwayFrame:
			return false
		case *http2.HeadersFrame:
			return f.StreamID == 1
		}
	}
}
