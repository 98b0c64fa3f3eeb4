package classifier

import "strings"

// scanJSONKeys walks a JSON document once and calls visit for every object
// key whose value is a string, a number or true, with the raw value (escapes are
// left as they are; a string value is passed without its quotes). Keys are
// reported at any depth, in document order. Malformed input ends the walk
// early; it never panics and never allocates.
//
// Written by hand because error bodies need a handful of keys wherever they
// sit (error.message, error.details[].quotaId, __type, ...) within a 2 µs
// budget: encoding/json allocates per value, and path-based readers such as
// gjson or jsonparser rescan the body once per path.
func scanJSONKeys(doc string, visit func(key, value string, isString bool)) {
	i := 0
	for {
		// Gaps between strings are short (": ", ",\n    "): a plain loop
		// beats strings.IndexByte's call overhead here.
		for i < len(doc) && doc[i] != '"' {
			i++
		}
		if i >= len(doc) {
			return
		}
		start := i + 1
		end := stringEnd(doc, start)
		if end < 0 {
			return
		}
		j := skipSpace(doc, end+1)
		if j >= len(doc) || doc[j] != ':' {
			i = end + 1
			continue
		}
		key := doc[start:end]
		k := skipSpace(doc, j+1)
		if k >= len(doc) {
			return
		}
		switch c := doc[k]; {
		case c == '"':
			vend := stringEnd(doc, k+1)
			if vend < 0 {
				return
			}
			visit(key, doc[k+1:vend], true)
			i = vend + 1
		case c == '-' || (c >= '0' && c <= '9'):
			m := k + 1
			for m < len(doc) && isNumberByte(doc[m]) {
				m++
			}
			visit(key, doc[k:m], false)
			i = m
		case c == 't' && len(doc)-k >= 4 && doc[k:k+4] == "true":
			visit(key, "true", false)
			i = k + 4
		case c == '[':
			// An array of strings ({"errors": ["..."]}): each under its key.
			i = scanStringArray(doc, k+1, key, visit)
		default:
			i = k
		}
	}
}

// stringEnd returns the index of the quote closing a JSON string whose
// contents start at from, or -1. A backslash escapes the byte after it.
func stringEnd(doc string, from int) int {
	// Jump from quote to quote (strings.IndexByte) rather than read each
	// byte: a body is mostly strings. A quote ends the string unless an odd
	// run of backslashes escapes it.
	for i := from; i < len(doc); i++ {
		j := strings.IndexByte(doc[i:], '"')
		if j < 0 {
			return -1
		}
		i += j
		slashes := 0
		for k := i - 1; k >= from && doc[k] == '\\'; k-- {
			slashes++
		}
		if slashes%2 == 0 {
			return i
		}
	}
	return -1
}

func skipSpace(doc string, i int) int {
	for i < len(doc) {
		switch doc[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

func isNumberByte(c byte) bool {
	return (c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'
}

// looksLikeJSON reports whether a body starts, after white space, like a JSON
// object or array.
func looksLikeJSON(body string) bool {
	i := skipSpace(body, 0)
	return i < len(body) && (body[i] == '{' || body[i] == '[')
}

// scanStringArray visits the leading string elements of the array that
// opens before doc[i] under key, and returns where the walk goes on: past
// the last string visited, or at the first element that is not a string
// (whose own keys the walk then reads).
func scanStringArray(doc string, i int, key string, visit func(key, value string, isString bool)) int {
	for {
		k := skipSpace(doc, i)
		if k >= len(doc) || doc[k] != '"' {
			return k
		}
		end := stringEnd(doc, k+1)
		if end < 0 {
			return len(doc)
		}
		visit(key, doc[k+1:end], true)
		i = skipSpace(doc, end+1)
		if i >= len(doc) || doc[i] != ',' {
			return i
		}
		i++
	}
}
