package journal_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/policyd/policyd/internal/journal"
)

func TestListContexts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t)

	// Eight contexts a minute apart (c0 oldest), the last two started at the
	// same instant so that the id breaks the tie; another tenant's one.
	type spec struct {
		provider, failureType string
		outcome               journal.Outcome
		start                 time.Duration
	}
	specs := []spec{
		{"openai", "RATE_LIMIT", journal.OutcomeResolved, 0},
		{"anthropic", "OVERLOADED", journal.OutcomeFailed, 1 * time.Minute},
		{"openai", "SERVER_ERROR", journal.OutcomeFailed, 2 * time.Minute},
		{"openai", "RATE_LIMIT", journal.OutcomeInProgress, 3 * time.Minute},
		{"google", "TIMEOUT", journal.OutcomeAbandoned, 4 * time.Minute},
		{"openai", "", journal.OutcomeInProgress, 5 * time.Minute},
		{"anthropic", "RATE_LIMIT", journal.OutcomeResolved, 6 * time.Minute},
		{"openai", "AUTH_INVALID", journal.OutcomeFailed, 6 * time.Minute},
	}
	ids := make([]string, len(specs))
	for i, sp := range specs {
		ids[i] = fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
		begin(t, s, journal.Context{ID: ids[i], Tenant: "acme", Provider: sp.provider, StartedAt: t0.Add(sp.start)})
		if sp.failureType != "" {
			record(t, s, "acme", journal.Attempt{ContextID: ids[i], Attempt: 1, At: t0.Add(sp.start), FailureType: sp.failureType})
		}
		if sp.outcome != journal.OutcomeInProgress {
			if _, _, err := s.FinishContext(ctx, "acme", ids[i], sp.outcome); err != nil {
				t.Fatal(err)
			}
		}
	}
	begin(t, s, journal.Context{Tenant: "other", Provider: "openai", StartedAt: t0})

	newestFirst := func(idx ...int) []string {
		var out []string
		for _, i := range idx {
			out = append(out, ids[i])
		}
		return out
	}
	tests := []struct {
		name   string
		tenant string
		filter journal.Filter
		want   []string
	}{
		{"all, newest first, id breaks ties", "acme", journal.Filter{}, newestFirst(7, 6, 5, 4, 3, 2, 1, 0)},
		{"outcome", "acme", journal.Filter{Outcome: journal.OutcomeFailed}, newestFirst(7, 2, 1)},
		{"provider", "acme", journal.Filter{Provider: "anthropic"}, newestFirst(6, 1)},
		{"failure type", "acme", journal.Filter{FailureType: "RATE_LIMIT"}, newestFirst(6, 3, 0)},
		{"failure type as the enum name", "acme", journal.Filter{FailureType: "FAILURE_TYPE_RATE_LIMIT"}, newestFirst(6, 3, 0)},
		{"time range [from, to)", "acme", journal.Filter{From: t0.Add(2 * time.Minute), To: t0.Add(5 * time.Minute)}, newestFirst(4, 3, 2)},
		{"combined", "acme", journal.Filter{Provider: "openai", Outcome: journal.OutcomeFailed, From: t0.Add(time.Minute)}, newestFirst(7, 2)},
		{"nothing matches", "acme", journal.Filter{Provider: "mistral"}, nil},
		{"another tenant", "nobody", journal.Filter{}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, next, err := s.ListContexts(ctx, tt.tenant, tt.filter)
			wantErr(t, err, nil)
			if next != "" {
				t.Errorf("next page token = %q on the only page", next)
			}
			if gotIDs := idsOf(got); !slices.Equal(gotIDs, tt.want) {
				t.Errorf("ids = %v, want %v", gotIDs, tt.want)
			}
		})
	}

	t.Run("pages", func(t *testing.T) {
		t.Parallel()
		var pages [][]string
		f := journal.Filter{PageSize: 3}
		for {
			got, next, err := s.ListContexts(ctx, "acme", f)
			wantErr(t, err, nil)
			pages = append(pages, idsOf(got))
			if next == "" {
				break
			}
			if len(pages) > 3 {
				t.Fatalf("more than 3 pages: %v", pages)
			}
			f.PageToken = next
		}
		want := [][]string{newestFirst(7, 6, 5), newestFirst(4, 3, 2), newestFirst(1, 0)}
		if !slices.EqualFunc(pages, want, slices.Equal) {
			t.Fatalf("pages = %v, want %v", pages, want)
		}
		// A filter applies across pages.
		got, next, err := s.ListContexts(ctx, "acme", journal.Filter{Provider: "openai", PageSize: 2})
		wantErr(t, err, nil)
		got2, next2, err := s.ListContexts(ctx, "acme", journal.Filter{Provider: "openai", PageSize: 2, PageToken: next})
		wantErr(t, err, nil)
		if ids := append(idsOf(got), idsOf(got2)...); !slices.Equal(ids, newestFirst(7, 5, 3, 2)) || next2 == "" {
			t.Fatalf("openai pages = %v (next %q), want %v and more", ids, next2, newestFirst(7, 5, 3, 2))
		}
	})

	t.Run("bad input", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name      string
			filter    journal.Filter
			wantField string
		}{
			{"token not base64", journal.Filter{PageToken: "!!"}, "page_token"},
			{"token not ours", journal.Filter{PageToken: base64.RawURLEncoding.EncodeToString([]byte("v1.x.y"))}, "page_token"},
			{"token of another version", journal.Filter{PageToken: base64.RawURLEncoding.EncodeToString([]byte("v9.1." + ids[0]))}, "page_token"},
			{"negative page size", journal.Filter{PageSize: -1}, "page_size"},
			{"outcome", journal.Filter{Outcome: "done"}, "outcome"},
			{"empty range", journal.Filter{From: t0, To: t0}, "started_before"},
		}
		for _, tt := range tests {
			_, _, err := s.ListContexts(ctx, "acme", tt.filter)
			wantField(t, err, tt.wantField)
		}
	})
}

func idsOf(cs []journal.Context) []string {
	var ids []string
	for _, c := range cs {
		ids = append(ids, c.ID)
	}
	return ids
}
