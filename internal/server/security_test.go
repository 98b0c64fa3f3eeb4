package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/auth"
	"github.com/policyd/policyd/internal/auth/authtest"
	"github.com/policyd/policyd/internal/classifier"
	"github.com/policyd/policyd/internal/journal"
	"github.com/policyd/policyd/internal/journal/journaltest"
	"github.com/policyd/policyd/internal/policy"
	"github.com/policyd/policyd/internal/validate"
)

const (
	tokenAcme = "acme-token-0123456789"
	tokenBeta = "beta-token-0123456789"
)

// tokenAuth is an Authenticator knowing the tenants acme and beta.
func tokenAuth(t *testing.T) *auth.Authenticator {
	t.Helper()
	tokens, err := auth.LoadTokens(authtest.TokensFile(t, [2]string{"acme", tokenAcme}, [2]string{"beta", tokenBeta}))
	if err != nil {
		t.Fatal(err)
	}
	return auth.NewTokenAuthenticator(tokens)
}

// serveSecured serves ps with sec on 127.0.0.1:0 and returns the address.
func serveSecured(t testing.TB, ps *PolicyServer, sec Security) string {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	return serveTest(t, ps, logger, WithServerOptions(sec.ServerOptions(logger)...)).addr
}

func dialT(t testing.TB, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func builtinServer() *PolicyServer {
	return NewPolicyServer(policy.Builtin(), WithClock(func() time.Time { return testNow }), WithRand(fixedRand(0.5)))
}

// as is ctx carrying token as a bearer token.
func as(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

var okFailure = &policydv1.ClassifyRequest{Failure: &policydv1.Failure{HttpStatus: 503}}

// stillServes fails t unless conn still answers a normal Classify.
func stillServes(t *testing.T, ctx context.Context, conn *grpc.ClientConn) {
	t.Helper()
	if _, err := policydv1.NewPolicyServiceClient(conn).Classify(ctx, okFailure); err != nil {
		t.Fatalf("a normal Classify afterwards: %v", err)
	}
}

func TestAuthTokens(t *testing.T) {
	t.Parallel()
	conn := dialT(t, serveSecured(t, builtinServer(), Security{Auth: tokenAuth(t)}), insecure.NewCredentials())
	client := policydv1.NewPolicyServiceClient(conn)
	tests := []struct {
		name     string
		md       []string // outgoing metadata pairs
		wantCode codes.Code
	}{
		{name: "no token", wantCode: codes.Unauthenticated},
		{name: "bad token", md: []string{"authorization", "Bearer wrong-token-0123456789"}, wantCode: codes.Unauthenticated},
		{name: "empty token", md: []string{"authorization", "Bearer "}, wantCode: codes.Unauthenticated},
		{name: "not bearer", md: []string{"authorization", "Basic " + tokenAcme}, wantCode: codes.Unauthenticated},
		{name: "token without scheme", md: []string{"authorization", tokenAcme}, wantCode: codes.Unauthenticated},
		{name: "good token", md: []string{"authorization", "Bearer " + tokenAcme}, wantCode: codes.OK},
		{name: "second tenant", md: []string{"authorization", "bearer " + tokenBeta}, wantCode: codes.OK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := metadata.AppendToOutgoingContext(testContext(t), tt.md...)
			_, err := client.Classify(ctx, okFailure)
			if got := status.Code(err); got != tt.wantCode {
				t.Fatalf("code = %v, want %v (err %v)", got, tt.wantCode, err)
			}
			if strings.Contains(status.Convert(err).Message(), "token-0123456789") {
				t.Errorf("message %q reveals a token", status.Convert(err).Message())
			}
			stillServes(t, as(testContext(t), tokenAcme), conn)
		})
	}
	t.Run("health without a token", func(t *testing.T) {
		t.Parallel()
		if _, err := healthpb.NewHealthClient(conn).Check(testContext(t), &healthpb.HealthCheckRequest{}); err != nil {
			t.Errorf("Check: %v", err)
		}
	})
	t.Run("reflection without a token", func(t *testing.T) {
		t.Parallel()
		stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(testContext(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("list services: %v", err)
		}
		if len(resp.GetListServicesResponse().GetService()) == 0 {
			t.Error("no services listed")
		}
	})
	t.Run("journal needs a token too", func(t *testing.T) {
		t.Parallel()
		_, err := policydv1.NewJournalServiceClient(conn).ListContexts(testContext(t), &policydv1.ListContextsRequest{})
		if got := status.Code(err); got != codes.Unauthenticated {
			t.Errorf("code = %v, want Unauthenticated", got)
		}
	})
}

// Tenant beta can neither read nor write tenant acme's contexts: each is
// NOT_FOUND, exactly as an id that does not exist, and acme's rows carry
// acme.
func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	url := journaltest.DatabaseURL(t) // first: it may start PostgreSQL
	store, err := journal.Open(testContext(t), url, journal.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	ps := NewPolicyServer(policy.Builtin(), WithJournal(store, 2*time.Second))
	conn := dialT(t, serveSecured(t, ps, Security{Auth: tokenAuth(t)}), insecure.NewCredentials())
	jc, pc := policydv1.NewJournalServiceClient(conn), policydv1.NewPolicyServiceClient(conn)
	ctx := testContext(t)
	acme, beta := as(ctx, tokenAcme), as(ctx, tokenBeta)

	begun, err := jc.BeginContext(acme, &policydv1.BeginContextRequest{Provider: "openai"})
	if err != nil {
		t.Fatal(err)
	}
	id := begun.GetContext().GetContextId()
	failure := &policydv1.Failure{HttpStatus: 503}
	if _, err := jc.RecordAttempt(acme, &policydv1.RecordAttemptRequest{ContextId: id, Attempt: 1, Failure: failure}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		call func() error
	}{
		{"GetContext", func() error {
			_, err := jc.GetContext(beta, &policydv1.GetContextRequest{ContextId: id})
			return err
		}},
		{"BeginContext with the id", func() error {
			_, err := jc.BeginContext(beta, &policydv1.BeginContextRequest{ContextId: id})
			return err
		}},
		{"RecordAttempt", func() error {
			_, err := jc.RecordAttempt(beta, &policydv1.RecordAttemptRequest{ContextId: id, Attempt: 2, Failure: failure})
			return err
		}},
		{"FinishContext", func() error {
			_, err := jc.FinishContext(beta, &policydv1.FinishContextRequest{ContextId: id, Outcome: policydv1.Outcome_OUTCOME_FAILED})
			return err
		}},
		{"GetErrorReport", func() error {
			_, err := jc.GetErrorReport(beta, &policydv1.GetErrorReportRequest{ContextId: id})
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if got := status.Code(err); got != codes.NotFound {
				t.Fatalf("code = %v, want NotFound (err %v)", got, err)
			}
			if msg := status.Convert(err).Message(); strings.Contains(msg, "acme") {
				t.Errorf("message %q names the other tenant", msg)
			}
		})
	}
	t.Run("NextDelay does not journal into it", func(t *testing.T) {
		resp, err := pc.NextDelay(beta, &policydv1.NextDelayRequest{ContextId: id, Attempt: 3, Failure: failure})
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetDecision().GetJournaled() {
			t.Error("journaled into another tenant's context")
		}
	})
	t.Run("ListContexts", func(t *testing.T) {
		list, err := jc.ListContexts(beta, &policydv1.ListContextsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.GetContexts()) != 0 {
			t.Errorf("beta lists %d contexts, want 0", len(list.GetContexts()))
		}
	})
	t.Run("the owner sees it unchanged, under its tenant", func(t *testing.T) {
		got, err := jc.GetContext(acme, &policydv1.GetContextRequest{ContextId: id})
		if err != nil {
			t.Fatal(err)
		}
		if n := len(got.GetAttempts()); n != 1 || got.GetContext().GetOutcome() != policydv1.Outcome_OUTCOME_IN_PROGRESS {
			t.Errorf("acme's context: %d attempts, outcome %v; want 1, in progress", n, got.GetContext().GetOutcome())
		}
		c, _, err := store.GetContext(ctx, "acme", id)
		if err != nil || c.Tenant != "acme" {
			t.Errorf("journal row: tenant %q, err %v; want acme", c.Tenant, err)
		}
	})
}

func TestMutualTLSTenant(t *testing.T) {
	t.Parallel()
	ca := authtest.NewCA(t, "policyd-test")
	srv := ca.Server("policyd")
	files, err := auth.LoadTLS(srv.CertFile, srv.KeyFile, ca.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg := files.Config()
	// A test-only interceptor, inside authentication, answers the tenant.
	echoTenant := grpc.ChainUnaryInterceptor(func(ctx context.Context, _ any, _ *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (any, error) {
		return nil, status.Error(codes.Aborted, "tenant="+auth.TenantFrom(ctx))
	})
	logger := slog.New(slog.DiscardHandler)
	addr := serveTest(t, builtinServer(), logger,
		WithServerOptions(append(Security{Auth: auth.NewCertAuthenticator(), TLS: cfg}.ServerOptions(logger), echoTenant)...)).addr

	tests := []struct {
		name     string
		creds    credentials.TransportCredentials
		wantCode codes.Code
		wantMsg  string
	}{
		{name: "client certificate CN is the tenant", creds: clientTLS(ca, ptr(ca.Client("acme"))), wantCode: codes.Aborted, wantMsg: "tenant=acme"},
		{name: "CN that is no tenant name", creds: clientTLS(ca, ptr(ca.Client("not a tenant"))), wantCode: codes.Unauthenticated},
		{name: "no client certificate", creds: clientTLS(ca, nil), wantCode: codes.Unavailable},
		{name: "certificate of another CA", creds: clientTLS(ca, ptr(authtest.NewCA(t, "other").Client("acme"))), wantCode: codes.Unavailable},
		{name: "plaintext", creds: insecure.NewCredentials(), wantCode: codes.Unavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			conn := dialT(t, addr, tt.creds)
			_, err := policydv1.NewPolicyServiceClient(conn).Classify(testContext(t), okFailure)
			if got := status.Code(err); got != tt.wantCode {
				t.Fatalf("code = %v, want %v (err %v)", got, tt.wantCode, err)
			}
			if !strings.Contains(status.Convert(err).Message(), tt.wantMsg) {
				t.Errorf("message %q, want it to contain %q", status.Convert(err).Message(), tt.wantMsg)
			}
		})
	}
}

func TestRateLimit(t *testing.T) {
	t.Parallel()
	// 0.1 calls per second: the bucket does not refill during the test.
	conn := dialT(t, serveSecured(t, builtinServer(), Security{Auth: tokenAuth(t), RateLimit: 0.1, RateBurst: 2}), insecure.NewCredentials())
	client := policydv1.NewPolicyServiceClient(conn)
	ctx := testContext(t)
	for i := range 2 {
		if _, err := client.Classify(as(ctx, tokenAcme), okFailure); err != nil {
			t.Fatalf("call %d within the burst: %v", i+1, err)
		}
	}
	var trailer metadata.MD
	_, err := client.Classify(as(ctx, tokenAcme), okFailure, grpc.Trailer(&trailer))
	if got := status.Code(err); got != codes.ResourceExhausted {
		t.Fatalf("code = %v, want ResourceExhausted (err %v)", got, err)
	}
	pushback := trailer.Get("grpc-retry-pushback-ms")
	if len(pushback) != 1 {
		t.Fatalf("trailer grpc-retry-pushback-ms = %q, want one value", pushback)
	}
	if ms, err := strconv.Atoi(pushback[0]); err != nil || ms < 1 || ms > 10000 {
		t.Errorf("grpc-retry-pushback-ms = %q, want 1..10000 (a token every 10s)", pushback[0])
	}
	if _, err := client.Classify(as(ctx, tokenBeta), okFailure); err != nil {
		t.Errorf("another tenant is limited too: %v", err)
	}
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("health is rate limited: %v", err)
	}
}

func TestDefaultDeadline(t *testing.T) {
	t.Parallel()
	intercept := deadlineInterceptor(time.Minute)
	const journalMethod = "/policyd.v1.JournalService/GetContext"
	tests := []struct {
		name   string
		method string
		ctx    func() (context.Context, context.CancelFunc)
		within time.Duration // 0: no deadline
	}{
		{name: "none given gets the default", method: journalMethod, ctx: func() (context.Context, context.CancelFunc) {
			return context.WithCancel(context.Background())
		}, within: time.Minute},
		{name: "the client's is kept", method: journalMethod, ctx: func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), time.Hour)
		}, within: time.Hour},
		{name: "PolicyService calls answer from memory", method: "/policyd.v1.PolicyService/Classify", ctx: func() (context.Context, context.CancelFunc) {
			return context.WithCancel(context.Background())
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := tt.ctx()
			defer cancel()
			_, err := intercept(ctx, nil, &grpc.UnaryServerInfo{FullMethod: tt.method}, func(ctx context.Context, _ any) (any, error) {
				dl, ok := ctx.Deadline()
				if tt.within == 0 {
					if ok {
						t.Errorf("deadline in %v, want none", time.Until(dl))
					}
					return nil, nil
				}
				if left := time.Until(dl); !ok || left > tt.within || left < tt.within-time.Minute/2 {
					t.Errorf("deadline in %v (set %v), want about %v", left, ok, tt.within)
				}
				return nil, nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// rawCodec sends and receives wire bytes as they are, so that tests can send
// what a protobuf library would refuse to marshal.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}
func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}
func (rawCodec) Name() string { return "proto" }

// wireWith marshals m and replaces the string "PLACEHOLDER" in it with
// repl, which must be as long.
func wireWith(t *testing.T, m proto.Message, repl string) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if len(repl) != len("PLACEHOLDER") || !bytes.Contains(b, []byte("PLACEHOLDER")) {
		t.Fatalf("bad placeholder use")
	}
	return bytes.ReplaceAll(b, []byte("PLACEHOLDER"), []byte(repl))
}

// nestedGroups is a ClassifyRequest whose unknown field 99 nests n groups.
func nestedGroups(n int) []byte {
	var b []byte
	for range n {
		b = protowire.AppendTag(b, 99, protowire.StartGroupType)
	}
	for range n {
		b = protowire.AppendTag(b, 99, protowire.EndGroupType)
	}
	return b
}

// Hostile and malformed requests: each gets a clear status, never a panic,
// and the server answers a normal call afterwards.
func TestMalformedRequests(t *testing.T) {
	t.Parallel()
	conn := dialT(t, serveSecured(t, builtinServer(), Security{MaxMessageBytes: 256 << 10}), insecure.NewCredentials())
	pc := policydv1.NewPolicyServiceClient(conn)
	const bad = "PLACEHOLDE\xff" // as long as PLACEHOLDER, not UTF-8
	causes := func(n int, msg string) []*policydv1.Cause {
		cs := make([]*policydv1.Cause, n)
		for i := range cs {
			cs[i] = &policydv1.Cause{Name: "Error", Message: msg}
		}
		return cs
	}
	classify := func(f *policydv1.Failure) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			_, err := pc.Classify(ctx, &policydv1.ClassifyRequest{Failure: f})
			return err
		}
	}
	nextDelay := func(r *policydv1.NextDelayRequest) func(ctx context.Context) error {
		return func(ctx context.Context) error { _, err := pc.NextDelay(ctx, r); return err }
	}
	raw := func(method string, b []byte) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			var out []byte
			return conn.Invoke(ctx, method, &b, &out, grpc.ForceCodecV2(rawCodec{}))
		}
	}
	const classifyMethod = "/policyd.v1.PolicyService/Classify"
	tests := []struct {
		name      string
		call      func(ctx context.Context) error
		wantCode  codes.Code
		wantField string // the BadRequest field of an InvalidArgument
	}{
		{name: "context_id not a UUID", call: nextDelay(&policydv1.NextDelayRequest{ContextId: "'; DROP TABLE retry_contexts; --", Attempt: 1, FailureType: policydv1.FailureType_FAILURE_TYPE_TIMEOUT}),
			wantCode: codes.InvalidArgument, wantField: "context_id"},
		{name: "unknown failure_type", call: nextDelay(&policydv1.NextDelayRequest{Attempt: 1, FailureType: 9999}),
			wantCode: codes.InvalidArgument, wantField: "failure_type"},
		{name: "unknown phase", call: classify(&policydv1.Failure{Phase: -3}), wantCode: codes.InvalidArgument, wantField: "failure.phase"},
		{name: "unknown safety", call: nextDelay(&policydv1.NextDelayRequest{Attempt: 1, FailureType: policydv1.FailureType_FAILURE_TYPE_TIMEOUT, Safety: 77}),
			wantCode: codes.InvalidArgument, wantField: "safety"},
		{name: "negative grpc_code", call: classify(&policydv1.Failure{GrpcCode: -1}), wantCode: codes.InvalidArgument, wantField: "failure.grpc_code"},
		{name: "negative attempt", call: nextDelay(&policydv1.NextDelayRequest{Attempt: -1, FailureType: policydv1.FailureType_FAILURE_TYPE_TIMEOUT}),
			wantCode: codes.InvalidArgument, wantField: "attempt"},
		{name: "negative elapsed", call: nextDelay(&policydv1.NextDelayRequest{Attempt: 1, FailureType: policydv1.FailureType_FAILURE_TYPE_TIMEOUT, Elapsed: durationpb.New(-time.Second)}),
			wantCode: codes.InvalidArgument, wantField: "elapsed"},
		{name: "elapsed of mixed signs", call: nextDelay(&policydv1.NextDelayRequest{Attempt: 1, FailureType: policydv1.FailureType_FAILURE_TYPE_TIMEOUT, Elapsed: &durationpb.Duration{Seconds: 1, Nanos: -1}}),
			wantCode: codes.InvalidArgument, wantField: "elapsed"},
		{name: "65 causes", call: classify(&policydv1.Failure{Causes: causes(classifier.MaxCauses+1, "x")}),
			wantCode: codes.InvalidArgument, wantField: "failure.causes"},
		{name: "a cause message over 8 KiB", call: classify(&policydv1.Failure{Causes: causes(3, strings.Repeat("x", validate.MaxFieldBytes+1))}),
			wantCode: codes.InvalidArgument, wantField: "failure.causes[0].message"},
		{name: "huge cause chain over the message size", call: classify(&policydv1.Failure{Causes: causes(100000, "connection reset")}),
			wantCode: codes.ResourceExhausted},
		{name: "body over the message size", call: classify(&policydv1.Failure{HttpStatus: 500, Body: strings.Repeat("b", 300<<10)}),
			wantCode: codes.ResourceExhausted},
		{name: "message over 64 KiB", call: classify(&policydv1.Failure{Message: strings.Repeat("m", validate.MaxMessageBytes+1)}),
			wantCode: codes.InvalidArgument, wantField: "failure.message"},
		{name: "non-UTF-8 message", call: raw(classifyMethod, wireWith(t, req(&policydv1.Failure{Message: "PLACEHOLDER"}), bad)),
			wantCode: codes.InvalidArgument, wantField: "failure.message"},
		{name: "non-UTF-8 cause code", call: raw(classifyMethod, wireWith(t, req(&policydv1.Failure{Causes: []*policydv1.Cause{{}, {Code: "PLACEHOLDER"}}}), bad)),
			wantCode: codes.InvalidArgument, wantField: "failure.causes[1].code"},
		{name: "non-UTF-8 header value", call: raw(classifyMethod, wireWith(t, req(&policydv1.Failure{Headers: map[string]string{"retry-after": "PLACEHOLDER"}}), bad)),
			wantCode: codes.InvalidArgument, wantField: `failure.headers["retry-after"]`},
		{name: "non-UTF-8 header name", call: raw(classifyMethod, wireWith(t, req(&policydv1.Failure{Headers: map[string]string{"PLACEHOLDER": "1"}}), bad)),
			wantCode: codes.InvalidArgument, wantField: "failure.headers"},
		{name: "non-UTF-8 profile", call: raw(classifyMethod, wireWith(t, &policydv1.ClassifyRequest{Failure: &policydv1.Failure{}, Profile: "PLACEHOLDER"}, bad)),
			wantCode: codes.InvalidArgument, wantField: "profile"},
		{name: "non-UTF-8 health service name", call: raw("/grpc.health.v1.Health/Check", wireWith(t, &healthpb.HealthCheckRequest{Service: "PLACEHOLDER"}, bad)),
			wantCode: codes.InvalidArgument, wantField: "service"},
		// Wire bytes no protobuf library writes are the caller's fault:
		// INVALID_ARGUMENT naming the request (grpc-go alone would answer
		// INTERNAL, as if the server had failed).
		{name: "truncated wire bytes", call: raw(classifyMethod, []byte{0x0a, 0x7f, 0x01}), wantCode: codes.InvalidArgument},
		{name: "deeply nested groups", call: raw(classifyMethod, nestedGroups(20000)), wantCode: codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.call(testContext(t))
			if got := status.Code(err); got != tt.wantCode {
				t.Fatalf("code = %v, want %v (err %v)", got, tt.wantCode, err)
			}
			if tt.wantField != "" {
				if got := violationField(err); got != tt.wantField {
					t.Errorf("BadRequest field = %q, want %q (err %v)", got, tt.wantField, err)
				}
			}
			stillServes(t, testContext(t), conn)
		})
	}
}

func TestInvalidUTF8MarkIsOnlyOurs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		unknown []byte
		want    string
	}{
		{name: "none"},
		{name: "another unknown field", unknown: protowire.AppendString(protowire.AppendTag(nil, 77, protowire.BytesType), "x")},
		{name: "the mark after another", unknown: protowire.AppendString(protowire.AppendTag(
			protowire.AppendVarint(protowire.AppendTag(nil, 77, protowire.VarintType), 5), utf8MarkField, protowire.BytesType), markNonce+"failure.model\x00not valid UTF-8"),
			want: "failure.model: not valid UTF-8"},
		// A client's own field with the mark's number chooses no error text.
		{name: "a forged mark", unknown: protowire.AppendString(protowire.AppendTag(nil, utf8MarkField, protowire.BytesType),
			"failure.model\x00you have been hacked")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := &policydv1.ClassifyRequest{}
			m.ProtoReflect().SetUnknown(tt.unknown)
			err := invalidUTF8(m)
			if got := ""; err != nil {
				got = err.Error()
				if got != tt.want {
					t.Errorf("invalidUTF8 = %q, want %q", got, tt.want)
				}
			} else if tt.want != "" {
				t.Errorf("invalidUTF8 = nil, want %q", tt.want)
			}
		})
	}
	if err := invalidUTF8("not a message"); err != nil {
		t.Errorf("invalidUTF8 of a non-message = %v", err)
	}
}

// clientTLS trusts ca and presents cert, if any.
func clientTLS(ca *authtest.CA, cert *authtest.Issued) credentials.TransportCredentials {
	cfg := &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{cert.TLS}
	}
	return credentials.NewTLS(cfg)
}

func ptr[T any](v T) *T { return &v }
