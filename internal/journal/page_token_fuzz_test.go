package journal

import (
	"errors"
	"testing"
	"time"
)

// FuzzDecodePageToken feeds ListContexts' page token parser arbitrary
// tokens (a client sends them back): each is either an InvalidError naming
// page_token or a keyset that encodes back to a token with the same keyset.
func FuzzDecodePageToken(f *testing.F) {
	f.Add(encodePageToken(time.Date(2026, 11, 22, 12, 0, 0, 123000, time.UTC), "123e4567-e89b-12d3-a456-426614174000"))
	f.Add("")
	f.Add("djEuMTIzLnh5eg")
	f.Add("not base64!")
	f.Fuzz(func(t *testing.T, token string) {
		at, id, err := decodePageToken(token)
		if err != nil {
			ie, ok := errors.AsType[*InvalidError](err)
			if !ok || ie.Field != "page_token" {
				t.Fatalf("error %v does not name page_token", err)
			}
			return
		}
		at2, id2, err := decodePageToken(encodePageToken(at, id))
		if err != nil || !at2.Equal(at) || id2 != id {
			t.Fatalf("round trip of (%v, %s) gave (%v, %s, %v)", at, id, at2, id2, err)
		}
	})
}

// FuzzDecodeIncidentToken does the same for ListIncidents' page tokens.
func FuzzDecodeIncidentToken(f *testing.F) {
	f.Add(encodeIncidentToken(time.Date(2026, 11, 22, 12, 0, 0, 123000, time.UTC), 42))
	f.Add("")
	f.Add("aTEuMTIzLjQ1")
	f.Add("not base64!")
	f.Fuzz(func(t *testing.T, token string) {
		at, id, err := decodeIncidentToken(token)
		if err != nil {
			ie, ok := errors.AsType[*InvalidError](err)
			if !ok || ie.Field != "page_token" {
				t.Fatalf("error %v does not name page_token", err)
			}
			return
		}
		at2, id2, err := decodeIncidentToken(encodeIncidentToken(at, id))
		if err != nil || !at2.Equal(at) || id2 != id {
			t.Fatalf("round trip of (%v, %d) gave (%v, %d, %v)", at, id, at2, id2, err)
		}
	})
}
