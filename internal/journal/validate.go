package journal

import (
	"strings"
	"unicode/utf8"
)

// checkName checks an identifying text (tenant, agent, provider, ...):
// valid UTF-8, no NUL (PostgreSQL text cannot hold it), at most maxNameLen
// characters. Such fields are rejected rather than cut: they are the
// caller's own names, and a cut name would silently match another.
func checkName(field, v string) error {
	if err := checkText(field, v); err != nil {
		return err
	}
	if n := utf8.RuneCountInString(v); n > maxNameLen {
		return invalid(field, "must be at most %d characters, got %d", maxNameLen, n)
	}
	return nil
}

// checkText checks that v can be stored in a text column.
func checkText(field, v string) error {
	if !utf8.ValidString(v) {
		return invalid(field, "must be valid UTF-8")
	}
	if strings.IndexByte(v, 0) >= 0 {
		return invalid(field, "must not contain NUL characters")
	}
	return nil
}

// clip makes v storable in a text column of at most max characters: invalid
// UTF-8 becomes U+FFFD, NULs are dropped, and a longer text is cut on a
// character boundary, ending in "…". Attempt texts are clipped rather than
// rejected: they are evidence from the wild, and a journal that refused a
// long error message would lose the attempt.
func clip(v string, max int) string {
	if !utf8.ValidString(v) {
		v = strings.ToValidUTF8(v, "\uFFFD")
	}
	if strings.IndexByte(v, 0) >= 0 {
		v = strings.ReplaceAll(v, "\x00", "")
	}
	if utf8.RuneCountInString(v) <= max {
		return v
	}
	n := 0
	for i := range v {
		if n == max-1 {
			return v[:i] + "…"
		}
		n++
	}
	return v
}
