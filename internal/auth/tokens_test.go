package auth

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	tokA = "tok-aaaaaaaaaaaaaaaa"
	tokB = "tok-bbbbbbbbbbbbbbbb"
)

func TestParseTokens(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		file    string
		wantErr string // substring; "" for success
	}{
		{name: "two tenants, comments and blank lines", file: "# tenants\n\nacme " + tokA + "\n  beta\t" + tokB + "  \n"},
		{name: "a tenant with two tokens", file: "acme " + tokA + "\nacme " + tokB + "\n"},
		{name: "empty", file: "# nothing\n", wantErr: "f.txt: no tokens"},
		{name: "one field", file: "acme\n", wantErr: "f.txt line 1: want \"TENANT TOKEN\", got 1 fields"},
		{name: "three fields", file: "\nacme " + tokA + " extra\n", wantErr: "line 2: want"},
		{name: "duplicate token", file: "acme " + tokA + "\nbeta " + tokA + "\n", wantErr: "line 2: duplicate token (also on line 1)"},
		{name: "short token", file: "acme short\n", wantErr: "line 1: token is 5 characters, at least 16"},
		{name: "bad tenant", file: "ac/me " + tokA + "\n", wantErr: "line 1: tenant name \"ac/me\""},
		{name: "long tenant", file: strings.Repeat("t", 65) + " " + tokA + "\n", wantErr: "line 1: tenant name is 65 bytes"},
		{name: "non-ASCII token", file: "acme tok-ééééééééééééé\n", wantErr: "not printable ASCII"},
		{name: "long line", file: "acme " + strings.Repeat("x", 5000) + "\n", wantErr: "a line is too long"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseTokens(strings.NewReader(tt.file), "f.txt")
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("ParseTokens: %v", err)
				}
				if got.Len() == 0 {
					t.Error("no tokens")
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), tokA) {
				t.Errorf("error %q reveals a token", err)
			}
		})
	}
}

func TestLookup(t *testing.T) {
	t.Parallel()
	tokens, err := ParseTokens(strings.NewReader("acme "+tokA+"\nbeta "+tokB+"\nacme tok-cccccccccccccccc\n"), "f")
	if err != nil {
		t.Fatal(err)
	}
	if tokens.Len() != 3 || tokens.Tenants() != 2 {
		t.Errorf("Len, Tenants = %d, %d, want 3, 2", tokens.Len(), tokens.Tenants())
	}
	tests := []struct {
		name, token, want string
		ok                bool
	}{
		{name: "first", token: tokA, want: "acme", ok: true},
		{name: "second", token: tokB, want: "beta", ok: true},
		{name: "rotated", token: "tok-cccccccccccccccc", want: "acme", ok: true},
		{name: "prefix", token: tokA[:len(tokA)-1]},
		{name: "longer", token: tokA + "a"},
		{name: "empty", token: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := tokens.Lookup(tt.token)
			if got != tt.want || ok != tt.ok {
				t.Errorf("Lookup = %q, %v, want %q, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestLoadTokens(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte("acme "+tokA+"\nbad\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTokens(path); err == nil || !strings.Contains(err.Error(), path+" line 2") {
		t.Errorf("err = %v, want one naming %s line 2", err, path)
	}
	if _, err := LoadTokens(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a missing file loaded")
	}
	big := strings.Repeat("# padding padding padding padding\n", maxTokensFileBytes/30)
	if _, err := ParseTokens(strings.NewReader(big), "big"); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("err = %v, want larger than", err)
	}
}

func FuzzParseTokens(f *testing.F) {
	f.Add("acme " + tokA + "\n")
	f.Add("# c\n\nacme " + tokA + "\nbeta\t" + tokB + "\n")
	f.Add("acme " + tokA + "\nacme " + tokA + "\n")
	f.Add("a b c\n")
	f.Fuzz(func(t *testing.T, file string) {
		tokens, err := ParseTokens(strings.NewReader(file), "fuzz")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "tokens file fuzz") {
				t.Errorf("error %q does not name the file", err)
			}
			return
		}
		// Every parsed line's token finds its tenant, and every tenant is valid.
		for _, line := range strings.Split(file, "\n") {
			fields := strings.Fields(line)
			if len(fields) != 2 || strings.HasPrefix(strings.TrimSpace(line), "#") {
				continue
			}
			tenant, ok := tokens.Lookup(fields[1])
			if !ok || tenant != fields[0] {
				t.Errorf("Lookup(token of %q) = %q, %v", line, tenant, ok)
			}
			if err := ValidateTenant(tenant); err != nil {
				t.Error(err)
			}
		}
	})
}
