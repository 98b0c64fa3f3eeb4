package classifier

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/enums"
)

// compiledRule is a Rule ready to evaluate.
type compiledRule struct {
	id     string
	blocks []block
	result result
}

// indexes find, per failure, which blocks its kinds, codes and top-level
// name satisfy.
type indexes struct {
	kinds, codes, names patternIndex
}

// result is what a rule answers.
type result struct {
	failureType  policydv1.FailureType
	retryable    bool
	reason       string
	recovery     string
	continuation string
	templated    bool // reason or recovery holds a {placeholder}
	// window is the wait a failure with no delay hint gets (a quota's
	// window, e.g. a per-minute quota waits a minute); 0: none.
	window time.Duration
}

// block is one compiled Condition. Empty fields do not constrain.
type block struct {
	index      int // position among all blocks, for the kind and code hit sets
	statuses   []statusRange
	grpcCodes  []int32
	phases     []policydv1.Phase
	providers  []glob
	operations []glob
	profiles   []string // lower case
	options    optionSet
	hasKind    bool
	hasCode    bool
	hasName    bool
	hint       int8 // 1: needs a delay hint, -1: needs none, 0: either
	message    []substring
	body       []substring
	text       []substring
}

type statusRange struct{ lo, hi int32 }

// optionSet is a bit set of caller switches.
type optionSet uint8

const optRetryFetchErrors optionSet = 1 << iota

var optionNames = map[string]optionSet{"retry_fetch_errors": optRetryFetchErrors}

// patternIndex finds, for a failure's kinds or codes, which blocks they satisfy:
// exact patterns in a map, globs in a list. Kinds are matched once per failure
// instead of once per block, which keeps Classify within its time budget.
type patternIndex struct {
	exact map[string][]int // lower case pattern -> block indexes
	globs []globPattern
	// byBigram files each glob under one byte pair its pattern needs (the
	// pair fewest globs need), so a kind is compared only with the globs
	// filed under a pair it has; noBigram holds the globs that need none.
	byBigram [64][]int32
	noBigram []int32
}

type globPattern struct {
	glob   glob
	blocks []int
}

func (p *patternIndex) add(pattern string, blockIndex int) {
	pattern = strings.ToLower(pattern)
	if strings.Contains(pattern, "*") {
		for i := range p.globs {
			if p.globs[i].glob.pattern == pattern {
				p.globs[i].blocks = append(p.globs[i].blocks, blockIndex)
				return
			}
		}
		p.globs = append(p.globs, globPattern{glob: compileGlob(pattern), blocks: []int{blockIndex}})
		return
	}
	if p.exact == nil {
		p.exact = make(map[string][]int)
	}
	p.exact[pattern] = append(p.exact[pattern], blockIndex)
}

// indexGlobs files the globs by byte pair; compile calls it once all are added.
func (p *patternIndex) indexGlobs() {
	var count [64]int
	for _, g := range p.globs {
		for m := g.glob.need; m != 0; m &= m - 1 {
			count[bits.TrailingZeros64(m)]++
		}
	}
	p.byBigram, p.noBigram = [64][]int32{}, nil
	for i, g := range p.globs {
		if g.glob.need == 0 {
			p.noBigram = append(p.noBigram, int32(i))
			continue
		}
		best := -1
		for m := g.glob.need; m != 0; m &= m - 1 {
			if b := bits.TrailingZeros64(m); best < 0 || count[b] < count[best] {
				best = b
			}
		}
		p.byBigram[best] = append(p.byBigram[best], int32(i))
	}
}

// compile turns a RuleSet into evaluable rules and the kind and code indexes.
func compile(rs RuleSet) (rules []compiledRule, idx indexes, nblocks int, err error) {
	seen := make(map[string]string, len(rs.Rules))
	for _, r := range rs.Rules {
		where := r.pos
		if where == "" {
			where = "rules"
		}
		if r.ID == "" {
			return nil, idx, 0, fmt.Errorf("%s: rule: id: must be set", where)
		}
		if prev, dup := seen[r.ID]; dup {
			return nil, idx, 0, fmt.Errorf("%s: rule %q: id: already used at %s", where, r.ID, prev)
		}
		seen[r.ID] = where
		res, err := compileResult(r)
		if err != nil {
			return nil, idx, 0, fmt.Errorf("%s: rule %q: %w", where, r.ID, err)
		}
		if len(r.When) == 0 {
			return nil, idx, 0, fmt.Errorf("%s: rule %q: when: needs at least one block", where, r.ID)
		}
		cr := compiledRule{id: r.ID, result: res}
		for i, c := range r.When {
			at := where
			if i < len(r.whenPos) {
				at = r.whenPos[i]
			}
			b, err := compileBlock(c, rs.Lists, nblocks, &idx)
			if err != nil {
				return nil, idx, 0, fmt.Errorf("%s: rule %q: when[%d]%w", at, r.ID, i, err)
			}
			cr.blocks = append(cr.blocks, b)
			nblocks++
		}
		rules = append(rules, cr)
	}
	idx.kinds.indexGlobs()
	idx.codes.indexGlobs()
	idx.names.indexGlobs()
	return rules, idx, nblocks, nil
}

// compileTypes reads the types section: known type names, each with a
// recovery action.
func compileTypes(in map[string]TypeText) (map[policydv1.FailureType]TypeText, error) {
	out := make(map[policydv1.FailureType]TypeText, len(in))
	for name, t := range in {
		ft, ok := enums.Parse[policydv1.FailureType](name)
		if !ok || ft == policydv1.FailureType_FAILURE_TYPE_UNSPECIFIED {
			return nil, fmt.Errorf("types: %q is not a failure type", name)
		}
		if strings.TrimSpace(t.Recovery) == "" {
			return nil, fmt.Errorf("types.%s.recovery: must be set: every answer carries an actionable message", name)
		}
		out[ft] = t
	}
	return out, nil
}

func compileResult(r Rule) (result, error) {
	v, ok := enums.Parse[policydv1.FailureType](r.Type)
	if !ok {
		return result{}, fmt.Errorf("type: %q is not a failure type (want e.g. RATE_LIMIT, SERVER_ERROR)", r.Type)
	}
	if strings.TrimSpace(r.Recovery) == "" {
		return result{}, fmt.Errorf("recovery: must be set: every answer carries an actionable message")
	}
	var window time.Duration
	if w := strings.TrimSpace(r.Window); w != "" {
		d, err := time.ParseDuration(w)
		if err != nil || d <= 0 || d > MaxDelayHint {
			return result{}, fmt.Errorf("window: %q is not a positive duration of at most a week (want e.g. 60s)", r.Window)
		}
		window = d
	}
	return result{
		window:       window,
		failureType:  policydv1.FailureType(v),
		retryable:    r.Retryable,
		reason:       r.Reason,
		recovery:     r.Recovery,
		continuation: r.ContinuationPrompt,
		templated:    strings.Contains(r.Reason, "{") || strings.Contains(r.Recovery, "{"),
	}, nil
}

// fieldError is a compile error of one condition field; the caller prefixes
// the rule and block, so its text starts with the field name.
func fieldError(field string, format string, args ...any) error {
	if field == "" {
		return fmt.Errorf(": %s", fmt.Sprintf(format, args...))
	}
	return fmt.Errorf(".%s: %s", field, fmt.Sprintf(format, args...))
}

func compileBlock(c Condition, lists map[string][]string, index int, idx *indexes) (block, error) {
	b := block{index: index}
	expand := func(field string, in []string) ([]string, error) {
		var out []string
		for _, v := range in {
			if name, ok := strings.CutPrefix(v, "$"); ok {
				list, found := lists[name]
				if !found {
					return nil, fieldError(field, "no list named %q", name)
				}
				out = append(out, list...)
				continue
			}
			out = append(out, v)
		}
		return out, nil
	}
	var err error
	fields := []struct {
		name string
		list *[]string
	}{
		{"status", &c.Status}, {"grpc_code", &c.GRPCCode}, {"kind", &c.Kind}, {"code", &c.Code}, {"name", &c.Name},
		{"message", &c.Message}, {"body", &c.Body}, {"text", &c.Text}, {"provider", &c.Provider},
		{"operation", &c.Operation}, {"phase", &c.Phase}, {"profile", &c.Profile}, {"option", &c.Option},
	}
	empty := true
	for _, f := range fields {
		expanded, e := expand(f.name, *f.list)
		if e != nil {
			return b, e
		}
		*f.list = expanded
		if len(expanded) > 0 {
			empty = false
		}
	}
	if c.Hint != nil {
		empty = false
		b.hint = -1
		if *c.Hint {
			b.hint = 1
		}
	}
	if empty {
		return b, fieldError("", "a block needs at least one condition")
	}
	for _, s := range c.Status {
		r, e := parseStatusRange(s)
		if e != nil {
			return b, fieldError("status", "%v", e)
		}
		b.statuses = append(b.statuses, r)
	}
	for _, s := range c.GRPCCode {
		code, e := parseGRPCCode(s)
		if e != nil {
			return b, fieldError("grpc_code", "%v", e)
		}
		b.grpcCodes = append(b.grpcCodes, code)
	}
	for _, s := range c.Phase {
		v, ok := enums.Parse[policydv1.Phase](s)
		if !ok {
			return b, fieldError("phase", "%q is not a phase (want CONNECT or MID_STREAM)", s)
		}
		b.phases = append(b.phases, v)
	}
	for _, s := range c.Option {
		bit, ok := optionNames[strings.ToLower(s)]
		if !ok {
			return b, fieldError("option", "%q is not a caller option (want retry_fetch_errors)", s)
		}
		b.options |= bit
	}
	b.providers = compileGlobs(c.Provider)
	b.operations = compileGlobs(c.Operation)
	b.profiles = lowerAll(c.Profile)
	if b.message, err = substrings("message", c.Message); err != nil {
		return b, err
	}
	if b.body, err = substrings("body", c.Body); err != nil {
		return b, err
	}
	if b.text, err = substrings("text", c.Text); err != nil {
		return b, err
	}
	for _, k := range c.Kind {
		if k == "" {
			return b, fieldError("kind", "empty entry")
		}
		idx.kinds.add(k, index)
		b.hasKind = true
	}
	for _, k := range c.Code {
		if k == "" {
			return b, fieldError("code", "empty entry")
		}
		idx.codes.add(k, index)
		b.hasCode = true
	}
	for _, k := range c.Name {
		if k == "" {
			return b, fieldError("name", "empty entry")
		}
		idx.names.add(k, index)
		b.hasName = true
	}
	return b, nil
}

func substrings(field string, in []string) ([]substring, error) {
	var out []substring
	for _, s := range in {
		if s == "" {
			return nil, fieldError(field, "empty entry")
		}
		out = append(out, newSubstring(strings.ToLower(s)))
	}
	return out, nil
}

func lowerAll(in []string) []string {
	var out []string
	for _, s := range in {
		out = append(out, strings.ToLower(s))
	}
	return out
}

// parseStatusRange reads "429" or "500-599".
func parseStatusRange(s string) (statusRange, error) {
	lo, hi, isRange := strings.Cut(strings.TrimSpace(s), "-")
	l, err := strconv.ParseInt(strings.TrimSpace(lo), 10, 32)
	if err != nil || l < 0 || l > 999 {
		return statusRange{}, fmt.Errorf("%q is not a status or range (want e.g. 429 or 500-599)", s)
	}
	if !isRange {
		return statusRange{int32(l), int32(l)}, nil
	}
	h, err := strconv.ParseInt(strings.TrimSpace(hi), 10, 32)
	if err != nil || h < l || h > 999 {
		return statusRange{}, fmt.Errorf("%q is not a status or range (want e.g. 429 or 500-599)", s)
	}
	return statusRange{int32(l), int32(h)}, nil
}

// parseGRPCCode reads a gRPC code by name ("UNAVAILABLE") or number ("14").
func parseGRPCCode(s string) (int32, error) {
	if n, err := strconv.Atoi(s); err == nil && n >= 0 && n <= 16 {
		return int32(n), nil
	}
	var c codes.Code
	if err := c.UnmarshalJSON([]byte(strconv.Quote(strings.ToUpper(s)))); err != nil {
		return 0, fmt.Errorf("%q is not a gRPC code (want e.g. UNAVAILABLE or 14)", s)
	}
	return int32(c), nil
}
