// Package cases reads labelled failure cases — the conformance suite's peer
// tests and real-failure corpus, or an operator's own file — and replays
// them through the policy in force: the real classifier and NextDelay, with
// a fixed clock and both ends of the random source.
//
// The format is documented in conformance/README.md.
package cases

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/enums"
)

// DefaultNow is the clock of a case that names none.
var DefaultNow = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// File is one case file.
type File struct {
	Path    string
	Suite   string // "peers", "corpus", or whatever an operator names
	Group   string
	Profile string
	Source  Source
	Cases   []*Case
}

// Source says where a case comes from.
type Source struct {
	Repo   string `yaml:"repo" json:"repo,omitempty"`
	Commit string `yaml:"commit" json:"commit,omitempty"`
	File   string `yaml:"file" json:"file,omitempty"`
	Test   string `yaml:"test" json:"test,omitempty"`
	URL    string `yaml:"url" json:"url,omitempty"`
	Quote  string `yaml:"quote" json:"quote,omitempty"`
}

// merged is s with the fields it leaves empty taken from def.
func (s Source) merged(def Source) Source {
	pick := func(a, b string) string {
		if a != "" {
			return a
		}
		return b
	}
	return Source{Repo: pick(s.Repo, def.Repo), Commit: pick(s.Commit, def.Commit), File: pick(s.File, def.File),
		Test: pick(s.Test, def.Test), URL: pick(s.URL, def.URL), Quote: pick(s.Quote, def.Quote)}
}

// String renders the source for a report line.
func (s Source) String() string {
	if s.Repo != "" {
		out := s.Repo
		if s.File != "" {
			out += "/" + s.File
		}
		if s.Test != "" {
			out += " " + s.Test
		}
		if s.Commit != "" {
			out += " @" + short(s.Commit)
		}
		return out
	}
	return s.URL
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}

// Case is one labelled failure.
type Case struct {
	ID      string
	File    string // path:line, for messages
	Suite   string
	Group   string
	Profile string
	Note    string
	Source  Source

	Failure     *policydv1.Failure
	FailureType policydv1.FailureType
	Options     *policydv1.ClassifyOptions
	Now         time.Time
	Attempt     int
	Elapsed     time.Duration
	Deadline    time.Duration // from Now; 0: none
	Safety      policydv1.OperationSafety

	// Expect is what the source asserts.
	Expect Expect
	// Policyd, when set, is a documented disagreement: what policyd
	// answers instead and why.
	Policyd *Override
}

// Override is a disagreement policyd keeps on purpose.
type Override struct {
	Why    string
	Expect Expect
}

// Expect is a verdict; a nil or empty field is not compared.
type Expect struct {
	Retryable  *bool          `yaml:"retryable"`
	Type       string         `yaml:"type"`
	Rule       string         `yaml:"rule"`
	RetryAfter string         `yaml:"retry_after"`
	Action     string         `yaml:"action"`
	Delay      *time.Duration `yaml:"delay"`
	DelayMin   *time.Duration `yaml:"delay_min"`
	DelayMax   *time.Duration `yaml:"delay_max"`
	StopReason string         `yaml:"stop_reason"`
}

// over returns e with the fields o sets replacing e's.
func (e Expect) over(o Expect) Expect {
	if o.Retryable != nil {
		e.Retryable = o.Retryable
	}
	if o.Type != "" {
		e.Type = o.Type
	}
	if o.Rule != "" {
		e.Rule = o.Rule
	}
	if o.RetryAfter != "" {
		e.RetryAfter = o.RetryAfter
	}
	if o.Action != "" {
		// Another action: the source's delay or stop reason no longer applies.
		e.Action, e.StopReason = o.Action, o.StopReason
		e.Delay, e.DelayMin, e.DelayMax = o.Delay, o.DelayMin, o.DelayMax
	}
	if o.Delay != nil || o.DelayMin != nil || o.DelayMax != nil {
		e.Delay, e.DelayMin, e.DelayMax = o.Delay, o.DelayMin, o.DelayMax
	}
	if o.StopReason != "" {
		e.StopReason = o.StopReason
	}
	return e
}

// empty reports whether e compares nothing.
func (e Expect) empty() bool { return e == Expect{} }

// Effective is what policyd is expected to answer: the source's verdict,
// or the documented disagreement over it.
func (c *Case) Effective() Expect {
	if c.Policyd == nil {
		return c.Expect
	}
	return c.Expect.over(c.Policyd.Expect)
}

// The YAML shapes, decoded strictly so that a misspelt key is an error
// with its line.
type rawFile struct {
	Suite   string    `yaml:"suite"`
	Group   string    `yaml:"group"`
	Profile string    `yaml:"profile"`
	Source  Source    `yaml:"source"`
	Cases   []rawCase `yaml:"cases"`
}

type rawCase struct {
	ID          string         `yaml:"id"`
	Group       string         `yaml:"group"`
	Profile     string         `yaml:"profile"`
	Note        string         `yaml:"note"`
	Source      Source         `yaml:"source"`
	Options     map[string]any `yaml:"options"`
	Now         string         `yaml:"now"`
	Attempt     int            `yaml:"attempt"`
	Elapsed     time.Duration  `yaml:"elapsed"`
	Deadline    time.Duration  `yaml:"deadline"`
	Safety      string         `yaml:"safety"`
	Failure     map[string]any `yaml:"failure"`
	FailureType string         `yaml:"failure_type"`
	Expect      Expect         `yaml:"expect"`
	Policyd     *struct {
		Why    string `yaml:"why"`
		Expect Expect `yaml:"expect"`
	} `yaml:"policyd"`
	line int
}

var idPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._/-]{0,199}$`)

// ReadFile reads and checks a case file.
func ReadFile(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(data, path)
}

// Parse reads a case file's bytes; errors name the file, the line and the field.
func Parse(data []byte, path string) (*File, error) {
	var raw rawFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	// Case lines, for messages: decode again as nodes.
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err == nil && len(doc.Content) > 0 {
		if cases := mapValue(doc.Content[0], "cases"); cases != nil {
			for i, n := range cases.Content {
				if i < len(raw.Cases) {
					raw.Cases[i].line = n.Line
				}
			}
		}
	}
	f := &File{Path: path, Suite: raw.Suite, Group: raw.Group, Profile: raw.Profile, Source: raw.Source}
	if len(raw.Cases) == 0 {
		return nil, fmt.Errorf("%s: cases: the file holds no case", path)
	}
	for i := range raw.Cases {
		c, err := convert(&raw.Cases[i], f)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, raw.Cases[i].line, err)
		}
		f.Cases = append(f.Cases, c)
	}
	return f, nil
}

func convert(r *rawCase, f *File) (*Case, error) {
	if !idPattern.MatchString(r.ID) {
		return nil, fmt.Errorf("id: %q must be 1 to 200 of [a-z0-9._/-], starting with a letter or digit", r.ID)
	}
	c := &Case{ID: r.ID, File: fmt.Sprintf("%s:%d", f.Path, r.line), Suite: f.Suite, Group: pick(r.Group, f.Group),
		Profile: pick(r.Profile, f.Profile), Note: r.Note, Source: r.Source.merged(f.Source),
		Attempt: r.Attempt, Elapsed: r.Elapsed, Deadline: r.Deadline, Expect: r.Expect, Now: DefaultNow}
	at := func(field string, err error) error { return fmt.Errorf("case %s: %s: %w", r.ID, field, err) }
	if c.Group == "" {
		c.Group = c.Suite
	}
	if c.Attempt == 0 {
		c.Attempt = 1
	}
	if c.Attempt < 0 || c.Attempt > 1000 {
		return nil, at("attempt", fmt.Errorf("%d is not within 1 to 1000", c.Attempt))
	}
	if c.Elapsed < 0 || c.Deadline < 0 {
		return nil, at("elapsed", errors.New("elapsed and deadline must not be negative"))
	}
	if r.Now != "" {
		t, err := time.Parse(time.RFC3339, r.Now)
		if err != nil {
			return nil, at("now", fmt.Errorf("%q is not an RFC 3339 time", r.Now))
		}
		c.Now = t
	}
	if r.Safety != "" {
		v, ok := enums.Parse[policydv1.OperationSafety](r.Safety)
		if !ok {
			return nil, at("safety", fmt.Errorf("%q is not SAFE, CONDITIONAL or IRREVERSIBLE", r.Safety))
		}
		c.Safety = v
	}
	if r.Failure == nil && r.FailureType == "" {
		return nil, at("failure", errors.New("a case needs a failure (or a failure_type)"))
	}
	if r.Failure != nil {
		c.Failure = &policydv1.Failure{}
		if err := fromJSONish(r.Failure, c.Failure); err != nil {
			return nil, at("failure", err)
		}
	}
	if r.FailureType != "" {
		t, ok := FailureType(r.FailureType)
		if !ok {
			return nil, at("failure_type", fmt.Errorf("%q is not a failure type", r.FailureType))
		}
		c.FailureType = t
	}
	if r.Options != nil {
		c.Options = &policydv1.ClassifyOptions{}
		if err := fromJSONish(r.Options, c.Options); err != nil {
			return nil, at("options", err)
		}
	}
	if r.Policyd != nil {
		if strings.TrimSpace(r.Policyd.Why) == "" {
			return nil, at("policyd.why", errors.New("a disagreement needs its reason"))
		}
		if r.Policyd.Expect.empty() {
			return nil, at("policyd.expect", errors.New("say what policyd answers instead"))
		}
		c.Policyd = &Override{Why: strings.TrimSpace(r.Policyd.Why), Expect: r.Policyd.Expect}
	}
	if c.Expect.empty() {
		return nil, at("expect", errors.New("a case needs at least one expected key"))
	}
	for _, e := range []Expect{c.Expect, c.Effective()} {
		if err := e.check(); err != nil {
			return nil, at("expect", err)
		}
	}
	return c, nil
}

func (e Expect) check() error {
	if e.Type != "" {
		if _, ok := FailureType(e.Type); !ok {
			return fmt.Errorf("type: %q is not a failure type", e.Type)
		}
	}
	if e.Action != "" {
		if _, ok := Action(e.Action); !ok {
			return fmt.Errorf("action: %q is not retry, stop or fall_back", e.Action)
		}
	}
	if e.StopReason != "" {
		if _, ok := StopReason(e.StopReason); !ok {
			return fmt.Errorf("stop_reason: %q is not a stop reason", e.StopReason)
		}
	}
	if e.RetryAfter != "" && e.RetryAfter != "none" {
		if _, err := time.ParseDuration(e.RetryAfter); err != nil {
			return fmt.Errorf("retry_after: %q is not a duration or none", e.RetryAfter)
		}
	}
	if e.Delay != nil && (e.DelayMin != nil || e.DelayMax != nil) {
		return errors.New("delay: give an exact delay or a range, not both")
	}
	return nil
}

// fromJSONish fills a message from a YAML mapping by way of its JSON form,
// so a case reads like the API's JSON. Header values written as numbers
// (retry-after: 20) are taken as their text.
func fromJSONish(v map[string]any, m proto.Message) error {
	if h, ok := v["headers"].(map[string]any); ok {
		for k, x := range h {
			if _, isString := x.(string); !isString && x != nil {
				h[k] = fmt.Sprint(x)
			}
		}
	}
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return protojson.Unmarshal(data, m)
}

func pick(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func mapValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// ReadAll reads the case files named by paths: files, directories (their
// *.yaml files) or globs. Case ids must be unique across them.
func ReadAll(paths ...string) ([]*File, error) {
	var names []string
	for _, p := range paths {
		st, err := os.Stat(p)
		switch {
		case err == nil && st.IsDir():
			m, _ := filepath.Glob(filepath.Join(p, "*.yaml"))
			names = append(names, m...)
		case err == nil:
			names = append(names, p)
		default:
			m, gerr := filepath.Glob(p)
			if gerr != nil || len(m) == 0 {
				return nil, fmt.Errorf("cases: %s: no such file", p)
			}
			names = append(names, m...)
		}
	}
	var files []*File
	seen := map[string]string{}
	for _, n := range names {
		f, err := ReadFile(n)
		if err != nil {
			return nil, err
		}
		for _, c := range f.Cases {
			if prev, dup := seen[c.ID]; dup {
				return nil, fmt.Errorf("%s: case %s: id already used at %s", c.File, c.ID, prev)
			}
			seen[c.ID] = c.File
		}
		files = append(files, f)
	}
	return files, nil
}
