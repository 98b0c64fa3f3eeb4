package classifier

import (
	"bufio"
	"bytes"
	_ "embed"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/enums"
)

// The learned fallback answers a failure no rule recognises from the words it
// shares with the labelled real failures of the conformance corpus: a naive
// Bayes model (one for the retryable verdict, one for the type) counted from
// the cases' source labels. Rules stay first; the model only replaces the
// answer "UNKNOWN, not retried", in the profiles that turn it on.
//
// Why a model and not more rules: every blind round reached words no rule
// held, and a failure that shares most of its words with failures a source
// labelled is, more often than not, labelled the same. Naive Bayes, rather
// than a library's classifier, because it is a few lines of counting whose
// counts are a readable file (learned_model.tsv) and whose answer names the
// words it rests on.

// RuleLearned is the rule id of an answer of the learned fallback.
const RuleLearned = "learned"

// The fallback answers only on evidence: at least minLearnedWords words the
// model knows that are minLift times likelier in one verdict than the other,
// and a verdict at least minLearnedPosterior likely. Otherwise the failure
// stays UNKNOWN and is not retried, as without the fallback.
const (
	minLearnedWords     = 2
	minLift             = 2
	minLearnedPosterior = 0.9
)

//go:embed learned_model.tsv
var learnedModelTSV []byte

// BuiltinModel is the model counted from the conformance corpus
// (learned_model.tsv), parsed once.
var BuiltinModel = sync.OnceValue(func() *Model {
	m, err := ParseModel(learnedModelTSV)
	if err != nil {
		panic("classifier: built-in learned model: " + err.Error())
	}
	return m
})

// unguessable are the types the fallback never answers: a type a failure
// does not state, or whose strategy does more than wait or stop, is not
// one to guess from words. CANCELED is the caller's own act, INVALID_STREAM
// is continued with a prompt, CONTEXT_TOO_LONG falls back to another model,
// and the TASK_ types are a task runner's own codes.
var unguessable = map[policydv1.FailureType]bool{
	policydv1.FailureType_FAILURE_TYPE_UNSPECIFIED:      true,
	policydv1.FailureType_FAILURE_TYPE_UNKNOWN:          true,
	policydv1.FailureType_FAILURE_TYPE_CANCELED:         true,
	policydv1.FailureType_FAILURE_TYPE_INVALID_STREAM:   true,
	policydv1.FailureType_FAILURE_TYPE_CONTEXT_TOO_LONG: true,
	policydv1.FailureType_FAILURE_TYPE_TASK_FATAL:       true,
	policydv1.FailureType_FAILURE_TYPE_TASK_TRANSIENT:   true,
}

// Example is one labelled failure the model is counted from; a nil
// Retryable, or a Type the fallback never guesses, leaves that model out.
type Example struct {
	Failure   *policydv1.Failure
	Retryable *bool
	Type      policydv1.FailureType
}

// Model is the learned fallback's two naive Bayes models.
type Model struct {
	retryable bayes // classes "false", "true"
	types     bayes // classes: failure types' short names
	// retried[y] is whether most of type y's labelled examples are
	// retryable: the type answered must agree with the verdict, so that a
	// profile's strategy for it does not contradict the verdict.
	retried []bool
}

// bayes is a Bernoulli naive Bayes model over the features present in a
// failure: a feature's absence is not evidence, so a short message is not
// penalised for the words it lacks.
type bayes struct {
	classes []string
	totals  []int
	counts  map[string][]int // features seen in at least two examples
	// retried and stopped count, per class, the examples labelled
	// retryable and not (the type model only).
	retried, stopped []int
	// prior, logp and telling are derived from totals and counts at load.
	prior []float64
	logp  map[string][]float64
	// telling holds the word features (not a status or phase) at least
	// minLift times likelier in one class than in another.
	telling map[string]bool
}

// Train counts a model from examples. Only features seen in at least two
// examples are kept, so that one case's own words do not decide others.
func Train(examples []Example) *Model {
	m := &Model{}
	var retryEx, typeEx []labelled
	for _, e := range examples {
		feats := Features(e.Failure)
		if e.Retryable != nil {
			retryEx = append(retryEx, labelled{class: strconv.FormatBool(*e.Retryable), feats: feats})
		}
		if !unguessable[e.Type] {
			typeEx = append(typeEx, labelled{class: enums.Short(e.Type), feats: singleWords(feats), retryable: e.Retryable})
		}
	}
	m.retryable = count(retryEx, []string{"false", "true"})
	m.types = count(typeEx, nil)
	m.types.retried = make([]int, len(m.types.classes))
	m.types.stopped = make([]int, len(m.types.classes))
	for _, e := range typeEx {
		if e.retryable == nil {
			continue
		}
		y := slices.Index(m.types.classes, e.class)
		if *e.retryable {
			m.types.retried[y]++
		} else {
			m.types.stopped[y]++
		}
	}
	m.derive()
	return m
}

type labelled struct {
	class     string
	feats     []string
	retryable *bool // for a type's example, its verdict if labelled
}

func (m *Model) derive() {
	m.retryable.derive()
	m.types.derive()
	m.retried = make([]bool, len(m.types.classes))
	for y := range m.retried {
		m.retried[y] = m.types.retried[y] > m.types.stopped[y]
	}
}

func count(examples []labelled, classes []string) bayes {
	idx := map[string]int{}
	for _, c := range classes {
		idx[c] = len(idx)
	}
	for _, e := range examples {
		if _, ok := idx[e.class]; !ok {
			idx[e.class] = len(idx)
			classes = append(classes, e.class)
		}
	}
	if len(classes) > 2 {
		sort.Strings(classes)
		for i, c := range classes {
			idx[c] = i
		}
	}
	b := bayes{classes: classes, totals: make([]int, len(classes)), counts: map[string][]int{}}
	df := map[string]int{}
	all := map[string][]int{}
	for _, e := range examples {
		y := idx[e.class]
		b.totals[y]++
		for _, f := range e.feats {
			df[f]++
			c := all[f]
			if c == nil {
				c = make([]int, len(classes))
				all[f] = c
			}
			c[y]++
		}
	}
	for f, c := range all {
		if df[f] >= 2 {
			b.counts[f] = c
		}
	}
	return b
}

// WriteTo writes the model as learned_model.tsv: one line per class list,
// total and feature, sorted, so that a change to the corpus shows as a
// readable diff.
func (m *Model) WriteTo(w io.Writer) (int64, error) {
	var buf bytes.Buffer
	buf.WriteString("# The learned fallback's counts (internal/classifier/learned.go), generated from the\n" +
		"# conformance cases' source labels by `go test ./conformance -run TestLearnedModel -update`.\n" +
		"# Do not edit: add or relabel cases and regenerate.\n")
	for _, part := range []struct {
		name string
		b    *bayes
	}{{"retryable", &m.retryable}, {"type", &m.types}} {
		fmt.Fprintf(&buf, "%s\tclasses\t%s\n", part.name, strings.Join(part.b.classes, "\t"))
		fmt.Fprintf(&buf, "%s\ttotal\t%s\n", part.name, joinInts(part.b.totals))
		if part.b.retried != nil {
			fmt.Fprintf(&buf, "%s\tretried\t%s\n", part.name, joinInts(part.b.retried))
			fmt.Fprintf(&buf, "%s\tstopped\t%s\n", part.name, joinInts(part.b.stopped))
		}
		feats := make([]string, 0, len(part.b.counts))
		for f := range part.b.counts {
			feats = append(feats, f)
		}
		sort.Strings(feats)
		for _, f := range feats {
			fmt.Fprintf(&buf, "%s\tf\t%s\t%s\n", part.name, f, joinInts(part.b.counts[f]))
		}
	}
	n, err := w.Write(buf.Bytes())
	return int64(n), err
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, "\t")
}

// ParseModel reads a model written by WriteTo.
func ParseModel(data []byte) (*Model, error) {
	m := &Model{}
	parts := map[string]*bayes{"retryable": &m.retryable, "type": &m.types}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if text == "" || text[0] == '#' {
			continue
		}
		cols := strings.Split(text, "\t")
		b := parts[cols[0]]
		if b == nil || len(cols) < 3 {
			return nil, fmt.Errorf("learned model: line %d: want retryable|type, a kind and values", line)
		}
		var err error
		switch cols[1] {
		case "classes":
			b.classes = cols[2:]
		case "total":
			b.totals, err = atois(cols[2:], len(b.classes))
		case "retried":
			b.retried, err = atois(cols[2:], len(b.classes))
		case "stopped":
			b.stopped, err = atois(cols[2:], len(b.classes))
		case "f":
			var c []int
			if len(cols) < 4 {
				return nil, fmt.Errorf("learned model: line %d: a feature line wants a feature and counts", line)
			}
			if c, err = atois(cols[3:], len(b.classes)); err == nil {
				if b.counts == nil {
					b.counts = map[string][]int{}
				}
				b.counts[cols[2]] = c
			}
		default:
			err = fmt.Errorf("unknown kind %q (want classes, total, retried, stopped or f)", cols[1])
		}
		if err != nil {
			return nil, fmt.Errorf("learned model: line %d: %w", line, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("learned model: %w", err)
	}
	for name, b := range parts {
		if len(b.classes) == 0 || len(b.totals) != len(b.classes) {
			return nil, fmt.Errorf("learned model: %s: no classes or totals", name)
		}
	}
	if !slices.Equal(m.retryable.classes, []string{"false", "true"}) {
		return nil, fmt.Errorf("learned model: retryable: classes %q, want false and true", m.retryable.classes)
	}
	if len(m.types.retried) != len(m.types.classes) || len(m.types.stopped) != len(m.types.classes) {
		return nil, fmt.Errorf("learned model: type: no retried or stopped counts")
	}
	m.derive()
	for _, c := range m.types.classes {
		if _, ok := enums.Parse[policydv1.FailureType](c); !ok {
			return nil, fmt.Errorf("learned model: %q is not a failure type", c)
		}
	}
	return m, nil
}

func atois(cols []string, want int) ([]int, error) {
	if len(cols) != want {
		return nil, fmt.Errorf("%d counts for %d classes", len(cols), want)
	}
	out := make([]int, len(cols))
	for i, s := range cols {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("count %q is not a whole number", s)
		}
		out[i] = n
	}
	return out, nil
}

// derive turns counts into log-probabilities, smoothed by half an example
// so that a feature a class never had weighs against it without ruling it out.
func (b *bayes) derive() {
	n := 0
	for _, t := range b.totals {
		n += t
	}
	k := len(b.classes)
	b.prior = make([]float64, k)
	for y, t := range b.totals {
		b.prior[y] = math.Log((float64(t) + 0.5) / (float64(n) + 0.5*float64(k)))
	}
	b.logp = make(map[string][]float64, len(b.counts))
	b.telling = map[string]bool{}
	for f, c := range b.counts {
		lp := make([]float64, k)
		for y, cy := range c {
			lp[y] = math.Log((float64(cy) + 0.5) / (float64(b.totals[y]) + 1))
		}
		b.logp[f] = lp
		if !strings.Contains(f, ":") && slices.Max(lp)-slices.Min(lp) >= math.Log(minLift) {
			b.telling[f] = true
		}
	}
}

// prediction is a model's answer: the class, its posterior probability, and
// the known features that favour it most over the runner-up.
type prediction struct {
	class     string
	posterior float64
	evidence  []string
}

// predict answers among the classes allow admits (nil: all).
func (b *bayes) predict(feats []string, allow func(y int) bool) prediction {
	score := append([]float64(nil), b.prior...)
	for y := range score {
		if allow != nil && !allow(y) {
			score[y] = math.Inf(-1)
		}
	}
	var known []string
	for _, f := range feats {
		lp, ok := b.logp[f]
		if !ok {
			continue
		}
		known = append(known, f)
		for y := range score {
			score[y] += lp[y]
		}
	}
	best, second := 0, -1
	for y := range score {
		if score[y] > score[best] {
			best = y
		}
	}
	for y := range score {
		if y != best && !math.IsInf(score[y], -1) && (second < 0 || score[y] > score[second]) {
			second = y
		}
	}
	if math.IsInf(score[best], -1) {
		return prediction{} // no class allowed
	}
	z := 0.0
	for _, s := range score {
		z += math.Exp(s - score[best])
	}
	p := prediction{class: b.classes[best], posterior: 1 / z}
	if second >= 0 {
		p.evidence = b.strongest(known, best, second, 3)
	}
	return p
}

func (b *bayes) lift(f string, y, other int) float64 { return b.logp[f][y] - b.logp[f][other] }

// strongest returns up to n of feats that favour class y over other most,
// strongest first; none that favours other.
func (b *bayes) strongest(feats []string, y, other, n int) []string {
	var out []string
	var lifts []float64
	for _, f := range feats {
		l := b.lift(f, y, other)
		if l <= 0 {
			continue
		}
		i := len(out)
		for i > 0 && lifts[i-1] < l {
			i--
		}
		if i >= n {
			continue
		}
		out, lifts = slices.Insert(out, i, f), slices.Insert(lifts, i, l)
		if len(out) > n {
			out, lifts = out[:n], lifts[:n]
		}
	}
	return out
}

// tellingWords counts the words of feats (not the status or phase every
// failure has) that the model knows and that tell its classes apart: at
// least minLift times likelier in one class than in another. Words every
// failure uses ("error", "the") are known but tell nothing.
func (b *bayes) tellingWords(feats []string) int {
	n := 0
	for _, f := range feats {
		if b.telling[f] {
			n++
		}
	}
	return n
}

// answer fills out with the model's verdict on f; it reports false, leaving
// out untouched, when the model knows too few of f's words to answer.
func (m *Model) answer(f *policydv1.Failure, out *policydv1.Classification, types map[policydv1.FailureType]TypeText) bool {
	feats := Features(f)
	if m.retryable.tellingWords(feats) < minLearnedWords {
		return false
	}
	r := m.retryable.predict(feats, nil)
	if r.posterior < minLearnedPosterior {
		return false
	}
	retryable := r.class == "true"
	t := m.types.predict(singleWords(feats), func(y int) bool { return m.retried[y] == retryable })
	ft, ok := enums.Parse[policydv1.FailureType](t.class)
	if !ok {
		ft = policydv1.FailureType_FAILURE_TYPE_UNKNOWN
	}
	out.FailureType = ft
	out.Retryable = retryable
	out.Rule = RuleLearned
	verdict := "not retried"
	if out.Retryable {
		verdict = "retried"
	}
	out.Reason = fmt.Sprintf("no rule recognised the failure; its words most resemble labelled real failures that are %s (%.0f %%: %s) and of type %s (%.0f %%: %s)",
		verdict, 100*r.posterior, quoteAll(r.evidence), t.class, 100*t.posterior, quoteAll(t.evidence))
	switch {
	case out.Retryable:
		out.RecoveryAction = "Retry with backoff; policyd judged from similar failures that a retry can succeed."
	case types[ft].Recovery != "":
		out.RecoveryAction = types[ft].Recovery
	default:
		out.RecoveryAction = "Do not retry; policyd judged from similar failures that a retry will not succeed. Inspect the error."
	}
	return true
}

func quoteAll(words []string) string {
	if len(words) == 0 {
		return "no one word stands out"
	}
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = strconv.Quote(w)
	}
	return strings.Join(q, ", ")
}

// Features are what the learned fallback reads of a failure: its HTTP status
// (and class), gRPC code and phase, and the words and word pairs of its
// message, body, exception name, error code and causes, lower-cased, with
// "-" read as "_" so that rate-limit and rate_limit are one word. A word
// starts with a letter and has two characters or more; a number counts only
// as a three-digit status.
func Features(f *policydv1.Failure) []string {
	var feats []string
	if s := f.GetHttpStatus(); s > 0 {
		feats = append(feats, "status:"+strconv.Itoa(int(s)), "status:"+strconv.Itoa(int(s/100))+"xx")
	} else {
		feats = append(feats, "status:none")
	}
	if g := f.GetGrpcCode(); g != 0 {
		feats = append(feats, "grpc:"+strconv.Itoa(int(g)))
	}
	if p := f.GetPhase(); p != policydv1.Phase_PHASE_UNSPECIFIED {
		feats = append(feats, "phase:"+enums.Lower(p))
	}
	seen := map[string]bool{}
	addFeature := func(f string) {
		if !seen[f] {
			seen[f] = true
			feats = append(feats, f)
		}
	}
	add := func(text string) {
		if len(text) > maxTextBytes {
			text = text[:maxTextBytes]
		}
		// The words joined by single spaces, so that every word and every
		// pair of neighbours is a substring of one string: one allocation
		// per text, not one per feature.
		norm, ends := words(text)
		for i, end := range ends {
			addFeature(norm[wordStart(ends, i):end])
			if i > 0 {
				addFeature(norm[wordStart(ends, i-1):end]) // the pair that ends here
			}
		}
	}
	add(f.GetMessage())
	body := f.GetBody()
	if len(body) > MaxBodyBytes {
		body = body[:MaxBodyBytes]
	}
	add(body)
	add(f.GetErrorName())
	add(f.GetErrorCode())
	for i, c := range f.GetCauses() {
		if i == MaxCauses {
			break
		}
		add(c.GetName())
		add(c.GetCode())
		add(c.GetMessage())
	}
	return feats
}

// wordStart is where word i of words' joined text starts.
func wordStart(ends []int, i int) int {
	if i == 0 {
		return 0
	}
	return ends[i-1] + 1
}

// singleWords is feats without the word pairs: the type model reads single
// words, which in the blind rounds' back-test named the type more often than
// pairs did (pairs split the few examples of each type too thinly).
func singleWords(feats []string) []string {
	out := make([]string, 0, len(feats))
	for _, f := range feats {
		if !strings.Contains(f, " ") {
			out = append(out, f)
		}
	}
	return out
}

// words splits text into the learned fallback's words (see Features),
// lower-cased and joined by single spaces, and returns where each ends.
func words(text string) (string, []int) {
	var b strings.Builder
	var ends []int
	start := -1
	flush := func(end int) {
		if start < 0 {
			return
		}
		w := text[start:end]
		start = -1
		letter := w[0] >= 'a' && w[0] <= 'z' || w[0] >= 'A' && w[0] <= 'Z'
		if !(letter && len(w) >= 2) && !(len(w) == 3 && allDigits(w)) {
			return
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		for i := 0; i < len(w); i++ {
			switch c := w[i]; {
			case c >= 'A' && c <= 'Z':
				b.WriteByte(c + 'a' - 'A')
			case c == '-':
				b.WriteByte('_')
			default:
				b.WriteByte(c)
			}
		}
		ends = append(ends, b.Len())
	}
	for i := 0; i < len(text); i++ {
		c := text[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' {
			if start < 0 {
				start = i
			}
			continue
		}
		flush(i)
	}
	flush(len(text))
	return b.String(), ends
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
