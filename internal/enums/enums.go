// Package enums is the one place that turns each API enum into its short
// name and back: FAILURE_TYPE_RATE_LIMIT is "RATE_LIMIT" in the journal, the
// metrics' labels, the CLI, the policy file and the cases. The prefix is the
// enum's own name in upper snake case, which buf lint's ENUM_VALUE_PREFIX
// rule guarantees for every enum of the API, so a new enum or value needs no
// code here.
package enums

import (
	"strconv"
	"strings"
	"sync"
	"unicode"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// Enum is a generated proto enum type.
type Enum interface {
	~int32
	protoreflect.Enum
}

// table is one enum's names, by number and by short name.
type table struct {
	short   map[protoreflect.EnumNumber]string
	numbers map[string]protoreflect.EnumNumber // upper-case short name → number
}

var tables sync.Map // protoreflect.FullName → *table

func tableOf(d protoreflect.EnumDescriptor) *table {
	if t, ok := tables.Load(d.FullName()); ok {
		return t.(*table)
	}
	prefix := Prefix(d)
	t := &table{short: map[protoreflect.EnumNumber]string{}, numbers: map[string]protoreflect.EnumNumber{}}
	values := d.Values()
	for i := range values.Len() {
		v := values.Get(i)
		s := strings.TrimPrefix(string(v.Name()), prefix)
		t.short[v.Number()] = s
		t.numbers[s] = v.Number()
	}
	got, _ := tables.LoadOrStore(d.FullName(), t)
	return got.(*table)
}

// Prefix is the prefix of d's value names: "FailureType" → "FAILURE_TYPE_".
func Prefix(d protoreflect.EnumDescriptor) string {
	var b strings.Builder
	for i, r := range string(d.Name()) {
		if unicode.IsUpper(r) && i > 0 {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	b.WriteByte('_')
	return b.String()
}

// Short is e's name without its prefix, e.g. "RATE_LIMIT"; a number the
// API does not define is written as the number.
func Short[E Enum](e E) string {
	if s, ok := tableOf(e.Descriptor()).short[protoreflect.EnumNumber(e)]; ok {
		return s
	}
	return strconv.Itoa(int(e))
}

// Lower is Short in lower case, e.g. "rate_limit", as the cases and CLI
// output spell actions and stop reasons.
func Lower[E Enum](e E) string { return strings.ToLower(Short(e)) }

// Parse reads a value by its short or full name, in any case, with spaces
// around it ignored. The zero value (UNSPECIFIED) is not a value anyone
// names: Parse refuses it.
func Parse[E Enum](s string) (E, bool) {
	var zero E
	d := zero.Descriptor()
	name := strings.ToUpper(strings.TrimSpace(s))
	name = strings.TrimPrefix(name, Prefix(d))
	n, ok := tableOf(d).numbers[name]
	if !ok || n == 0 {
		return zero, false
	}
	return E(n), true
}

// Names lists E's short names, the zero value's excepted, in number order:
// for error messages that say what is allowed.
func Names[E Enum]() []string {
	var zero E
	values := zero.Descriptor().Values()
	t := tableOf(zero.Descriptor())
	var out []string
	for i := range values.Len() {
		if n := values.Get(i).Number(); n != 0 {
			out = append(out, t.short[n])
		}
	}
	return out
}
