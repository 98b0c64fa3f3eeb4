package policy

import (
	"fmt"
	"strconv"
)

// ParseError is what is wrong with a policy file: the file, the line and
// the field, e.g.
// `policy.yaml:7: profiles.fast.strategies.SERVER_ERROR.initial_delay: "soon" is not a duration`.
// Every error of the file's own sections is one; the classification rules'
// errors (internal/classifier) carry the same file:line prefix.
type ParseError struct {
	File  string
	Line  int    // 0: the file as a whole
	Field string // the field's path; "" for the document
	Err   error
}

func (e *ParseError) Error() string {
	s := e.File
	if e.Line > 0 {
		s += ":" + strconv.Itoa(e.Line)
	}
	if e.Field != "" {
		s += ": " + e.Field
	}
	return s + ": " + e.Err.Error()
}

func (e *ParseError) Unwrap() error { return e.Err }

// errAt is a *ParseError at line of file for field, its message formatted.
func errAt(file string, line int, field, format string, args ...any) error {
	return &ParseError{File: file, Line: line, Field: field, Err: fmt.Errorf(format, args...)}
}
