package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/policyd/policyd/internal/loadgen"
)

func TestSoakSummaryAndCheck(t *testing.T) {
	const mb = 1 << 20
	boom := errors.New("boom")
	tests := []struct {
		name    string
		r       soakResult
		summary string // a substring of the summary line
		wantErr string // a substring of check's error; empty: none
	}{
		{
			name:    "clean, growth under 16 MiB",
			r:       soakResult{result: &loadgen.Result{Calls: 1000, Elapsed: time.Second}, rssStart: 30 * mb, rssEnd: 45 * mb},
			summary: "requests=1000 errors=0 unjournaled=0/0 rps=1000 p99=0s rss_start=30.0MiB rss_end=45.0MiB",
		},
		{
			name:    "growth over 16 MiB",
			r:       soakResult{result: &loadgen.Result{Calls: 1000, Elapsed: time.Second}, rssStart: 30 * mb, rssEnd: 47 * mb},
			wantErr: "RSS grew from 30.0 MiB to 47.0 MiB, more than the 16.0 MiB allowed",
		},
		{
			name: "a quarter of a large start is allowed",
			r:    soakResult{result: &loadgen.Result{Calls: 1000, Elapsed: time.Second}, rssStart: 100 * mb, rssEnd: 125 * mb},
		},
		{
			name:    "more than a quarter of a large start",
			r:       soakResult{result: &loadgen.Result{Calls: 1000, Elapsed: time.Second}, rssStart: 100 * mb, rssEnd: 126 * mb},
			wantErr: "more than the 25.0 MiB allowed",
		},
		{
			name:    "errors",
			r:       soakResult{result: &loadgen.Result{Calls: 1000, Errors: 3, FirstErr: boom, Elapsed: time.Second}, rssStart: 30 * mb, rssEnd: 30 * mb},
			summary: "errors=3 ",
			wantErr: "3 calls failed, the first: boom",
		},
		{
			name:    "errors in the warm-up count",
			r:       soakResult{result: &loadgen.Result{Calls: 1000, FirstErr: boom, Elapsed: time.Second}, warmupErrors: 2, rssStart: 30 * mb, rssEnd: 30 * mb},
			summary: "errors=2 ",
			wantErr: "2 calls failed",
		},
		{
			name:    "1% unjournaled is allowed",
			r:       soakResult{result: &loadgen.Result{Calls: 1000, Elapsed: time.Second}, journaled: 400, unjournaled: 4, rssStart: 30 * mb, rssEnd: 30 * mb},
			summary: "unjournaled=4/400 ",
		},
		{
			name:    "more than 1% unjournaled",
			r:       soakResult{result: &loadgen.Result{Calls: 1000, Elapsed: time.Second}, journaled: 400, unjournaled: 5, rssStart: 30 * mb, rssEnd: 30 * mb},
			summary: "unjournaled=5/400 ",
			wantErr: "5 of 400 journaled NextDelay calls answered journaled=false, more than 1%",
		},
		{
			name:    "no calls",
			r:       soakResult{result: &loadgen.Result{}, rssStart: 30 * mb, rssEnd: 30 * mb},
			wantErr: "no calls",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.r.seconds, tt.r.concurrency = 60, 50
			line := tt.r.summaryLine()
			if !strings.HasPrefix(line, "soak: seconds=60 concurrency=50 requests=") || !strings.Contains(line, tt.summary) {
				t.Errorf("summaryLine() = %q, want it to start with the seconds and concurrency and contain %q", line, tt.summary)
			}
			err := tt.r.check()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("check() = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("check() = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestParseConfigSoakSeconds(t *testing.T) {
	tests := []struct {
		name        string
		args        []string
		benchEnv    string
		soakEnv     string
		wantSeconds float64
	}{
		{name: "soak default", args: []string{"--soak"}, benchEnv: "5", wantSeconds: 60},
		{name: "soak env", args: []string{"--soak"}, soakEnv: "15", wantSeconds: 15},
		{name: "soak flag", args: []string{"--soak", "--seconds", "20"}, soakEnv: "15", wantSeconds: 20},
		{name: "bench env", args: nil, benchEnv: "5", soakEnv: "15", wantSeconds: 5},
		{name: "bench default", args: nil, soakEnv: "15", wantSeconds: 12},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("BENCH_SECONDS", tt.benchEnv)
			t.Setenv("SOAK_SECONDS", tt.soakEnv)
			c, err := parseConfig(append([]string{"--database-url", "postgres://x"}, tt.args...), new(strings.Builder))
			if err != nil || c.seconds != tt.wantSeconds {
				t.Errorf("parseConfig(%q) = %v seconds, %v; want %v", tt.args, c.seconds, err, tt.wantSeconds)
			}
		})
	}
}
