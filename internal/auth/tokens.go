package auth

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Token limits: a token shorter than MinTokenLen is too easy to guess; one
// longer than MaxTokenLen is not a token.
const (
	MinTokenLen = 16
	MaxTokenLen = 1024
	// maxTokensFileBytes bounds the file; 1 MiB is some ten thousand tokens.
	maxTokensFileBytes = 1 << 20
)

// Tokens maps bearer tokens to tenants. The zero value knows no token.
// It keeps only the tokens' SHA-256 digests.
type Tokens struct {
	entries []tokenEntry
}

type tokenEntry struct {
	digest [sha256.Size]byte
	tenant string
}

// Len is the number of tokens.
func (t *Tokens) Len() int { return len(t.entries) }

// Tenants is the number of distinct tenants.
func (t *Tokens) Tenants() int {
	seen := make(map[string]bool, len(t.entries))
	for _, e := range t.entries {
		seen[e.tenant] = true
	}
	return len(seen)
}

// Lookup returns the tenant of token. It hashes token and compares the
// digest with every entry's in constant time, so neither the time taken nor
// its errors reveal how much of a token matched or which entry did.
func (t *Tokens) Lookup(token string) (tenant string, ok bool) {
	d := sha256.Sum256([]byte(token))
	found := -1
	for i := range t.entries {
		eq := subtle.ConstantTimeCompare(d[:], t.entries[i].digest[:])
		found = subtle.ConstantTimeSelect(eq, i, found)
	}
	if found < 0 {
		return "", false
	}
	return t.entries[found].tenant, true
}

// LoadTokens reads the tokens file at path; see ParseTokens.
func LoadTokens(path string) (*Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokens file: %w", err)
	}
	defer func() { _ = f.Close() }()
	return ParseTokens(f, path)
}

// ParseTokens parses a tokens file read from r; name (the file's path) is
// used in errors. Each line is "TENANT TOKEN" separated by spaces or tabs;
// blank lines and lines starting with "#" are ignored. A tenant may have
// several tokens (to rotate them); a token may appear once. Tenants follow
// ValidateTenant; tokens are MinTokenLen..MaxTokenLen printable ASCII
// characters without spaces (what fits an HTTP/2 header). Errors name the
// file and line but never contain a token. A file without tokens is an
// error: with auth on, it would lock every caller out.
func ParseTokens(r io.Reader, name string) (*Tokens, error) {
	t := &Tokens{}
	lineOf := map[[sha256.Size]byte]int{}
	data, err := io.ReadAll(io.LimitReader(r, maxTokensFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("tokens file %s: %w", name, err)
	}
	if len(data) > maxTokensFileBytes {
		return nil, fmt.Errorf("tokens file %s: larger than %d bytes", name, maxTokensFileBytes)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), MaxTokenLen+MaxTenantLen+256)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf("tokens file %s line %d: want \"TENANT TOKEN\", got %d fields", name, n, len(fields))
		}
		tenant, token := fields[0], fields[1]
		if err := ValidateTenant(tenant); err != nil {
			return nil, fmt.Errorf("tokens file %s line %d: %w", name, n, err)
		}
		if err := validateToken(token); err != nil {
			return nil, fmt.Errorf("tokens file %s line %d: %w", name, n, err)
		}
		d := sha256.Sum256([]byte(token))
		if prev, dup := lineOf[d]; dup {
			return nil, fmt.Errorf("tokens file %s line %d: duplicate token (also on line %d)", name, n, prev)
		}
		lineOf[d] = n
		t.entries = append(t.entries, tokenEntry{digest: d, tenant: tenant})
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("tokens file %s: a line is too long", name)
		}
		return nil, fmt.Errorf("tokens file %s: %w", name, err)
	}
	if len(t.entries) == 0 {
		return nil, fmt.Errorf("tokens file %s: no tokens", name)
	}
	return t, nil
}

// validateToken checks a token's length and characters without quoting it.
func validateToken(tok string) error {
	if len(tok) < MinTokenLen {
		return fmt.Errorf("token is %d characters, at least %d required", len(tok), MinTokenLen)
	}
	if len(tok) > MaxTokenLen {
		return fmt.Errorf("token is %d characters, at most %d allowed", len(tok), MaxTokenLen)
	}
	for i := 0; i < len(tok); i++ {
		if c := tok[i]; c < 0x21 || c > 0x7e {
			return fmt.Errorf("token has a character that is not printable ASCII at offset %d", i)
		}
	}
	return nil
}
