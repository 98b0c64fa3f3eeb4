package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/policy"
)

// lines returns the JSON log lines written so far.
func (b *logBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(b.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// TestCallLogging checks what a call leaves in the log at each level: at
// info, nothing for a successful call and one "finished call" line naming
// the method, code and error for a failed one; at debug, "started call" and "finished call" for
// every call.
func TestCallLogging(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		level slog.Level
		ok    bool
		want  []string // messages, in order
	}{
		{"info, success", slog.LevelInfo, true, nil},
		{"info, failure", slog.LevelInfo, false, []string{"finished call"}},
		{"debug, success", slog.LevelDebug, true, []string{"started call", "finished call"}},
		{"debug, failure", slog.LevelDebug, false, []string{"started call", "finished call"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var buf logBuffer
			logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: tt.level}))
			ts := serveTest(t, NewPolicyServer(policy.Builtin()), logger)
			gs, conn := ts.gs, ts.conn
			req := &policydv1.ClassifyRequest{Failure: &policydv1.Failure{HttpStatus: 503}}
			if !tt.ok {
				req.Failure.HttpStatus = 1000
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			_, err := policydv1.NewPolicyServiceClient(conn).Classify(ctx, req)
			if (err == nil) != tt.ok {
				t.Fatalf("Classify error = %v, want ok=%v", err, tt.ok)
			}
			gs.GracefulStop() // every log line is written
			var got []string
			var finished map[string]any
			for _, l := range buf.lines(t) {
				if msg, _ := l["msg"].(string); strings.HasSuffix(msg, " call") {
					got = append(got, msg)
					if msg == "finished call" {
						finished = l
					}
				}
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Fatalf("logged %q, want %q", got, tt.want)
			}
			if tt.ok || finished == nil {
				return
			}
			for k, want := range map[string]string{
				"grpc.service": "policyd.v1.PolicyService", "grpc.method": "Classify", "grpc.code": "InvalidArgument",
				"level": "INFO",
			} {
				if finished[k] != want {
					t.Errorf("finished call %s = %v, want %q (line %v)", k, finished[k], want, finished)
				}
			}
			if e, _ := finished["grpc.error"].(string); !strings.Contains(e, "failure.http_status") {
				t.Errorf("finished call grpc.error = %q, want the field named", e)
			}
		})
	}
}
