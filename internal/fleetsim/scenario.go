package fleetsim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

// The provider the agents call, as the failures name it.
const (
	Provider = "openai"
	// Model is the model every agent calls, and the one that fails.
	Model = "gpt-4o"
	// OtherModel is the model half the agents call in the partial scenario;
	// it never fails.
	OtherModel = "gpt-4o-mini"
	// KeyID is the API key every agent shares.
	KeyID = "sim-key"
)

// The scenarios' names.
const (
	Outage  = "outage"
	Quota   = "quota"
	Herd    = "herd"
	Partial = "partial"
	// Restart is the outage with policyd killed RestartDown after the
	// outage starts and started again RestartDown later, with no state.
	Restart = "restart"
	// Tokens is the quota on input tokens: prompts of PromptMin to
	// PromptMax tokens against a limit of TokensPerMinute.
	Tokens = "tokens"
	// Classes is the quota with the agents' calls in two priority
	// classes: the interactive agents' calls interactive, the batch
	// agents' batch (DeadlineOf).
	Classes = "classes"
	// Output is the quota on output tokens, Anthropic's way: calls that
	// produce OutputMin to OutputMax tokens against a limit of
	// OutputTokensPerMinute, with Anthropic's rate-limit headers.
	Output = "output"
)

// RestartDown is how long into the outage the restart scenario kills
// policyd, and how long after that it restarts it.
const RestartDown = 30 * time.Second

// ScenarioNames are the scenarios in the order the reports list them.
var ScenarioNames = []string{Outage, Quota, Herd, Partial, Restart, Tokens, Classes, Output}

// Every logical call has a deadline, by its agent's kind: half the agents
// are interactive (a person waits for a chat answer or a coding CLI's
// turn, and gives up after about a minute), half run batch work (a task
// runner, an evaluation job) with 10 minutes a call, the OpenAI and
// Anthropic SDKs' default request timeout. Every policy stops a call that
// cannot finish by its deadline: no retry, wait or park past it, and an
// answer that comes after it is a call given up.
const (
	InteractiveDeadline = time.Minute
	BatchDeadline       = 10 * time.Minute
)

// DeadlineOf is agent i's deadline: agents 0, 1 interactive, 2, 3 batch,
// and so on, so that the partial scenario's two models (odd and even
// agents) get both kinds alike.
func DeadlineOf(i int) time.Duration {
	if (i/2)%2 == 0 {
		return InteractiveDeadline
	}
	return BatchDeadline
}

// Timing is a run's length and its incident's place in it.
type Timing struct {
	// Duration of the run, virtual.
	Duration time.Duration
	// Start of the incident. The herd's lasts HerdFor; the others' end at End,
	// when the provider recovers.
	Start, End time.Duration
}

// DefaultTiming is 6 minutes, an incident from 1 to 3 minutes (the herd's
// hint from 60 s to 70 s), a minute of baseline before it and three after.
var DefaultTiming = Timing{Duration: 360 * time.Second, Start: 60 * time.Second, End: 180 * time.Second}

// HerdFor is how long the synchronised 429 lasts: a window that resets at
// t0 + 10 s, so every agent is told the same end.
const HerdFor = 10 * time.Second

// Quota scenario: the key allows QuotaPerMinute requests a minute, a token
// bucket of QuotaBurst (one second's worth).
const (
	QuotaPerMinute = 600
	QuotaBurst     = 10
)

// Tokens scenario: the key allows TokensPerMinute input tokens a minute,
// a token bucket that holds up to the minute's limit and refills
// continuously, as Anthropic documents its token limits ("Rate limits":
// "continuously replenished up to your maximum limit"), and starts the
// window with a second's worth (the key was busy until then); and
// TokenScenarioRPM requests a minute, which never binds. The headers are
// OpenAI's, as in the other scenarios. Every call's
// prompt is PromptTokens long: log-uniform from PromptMin to PromptMax, as
// many prompts of 1–10 k tokens (a chat turn, a short tool loop) as of
// 10–100 k (an agent carrying a long context or a repository); the mean is
// 99,000 / ln 100 ≈ 21,500 tokens. The agents' demand, about 17 calls a
// second, is about 360,000 tokens a second: twice the limit.
const (
	TokensPerMinute  = 10_800_000
	TokenScenarioRPM = 10_000
	PromptMin        = 1_000
	PromptMax        = 100_000
)

// Output scenario: the key allows OutputTokensPerMinute output tokens a
// minute, a token bucket like the tokens scenario's (it holds up to the
// minute's limit, refills continuously, starts the window with a second's
// worth), and OutputScenarioRPM requests and OutputScenarioITPM input
// tokens a minute, which never bind. The provider speaks Anthropic's
// headers (anthropic-ratelimit-{requests,input-tokens,output-tokens}-*)
// and its 429 (retry-after in whole seconds). A call's output is unknown
// until it ends: the provider charges it when it admits the call, as if
// its reservation were exact, and a call the bucket cannot hold is a 429.
// Every call's output is OutputTokens long: log-uniform from OutputMin to
// OutputMax, as many short answers (a tool call, a sentence) as long
// generations (a file, a patch); the mean is 9,900 / ln 100 ≈ 2,150
// tokens. The agents' demand, about 17 calls a second, is about 36,500
// output tokens a second: twice the limit. The latency does not depend on
// the output (the other scenarios' lognormal).
const (
	OutputTokensPerMinute = 1_080_000
	OutputScenarioRPM     = 10_000
	OutputScenarioITPM    = 40_000_000
	OutputMin             = 100
	OutputMax             = 10_000
)

// OutputTokens draws a call's output in tokens.
func OutputTokens(r *rand.Rand) int64 {
	return int64(OutputMin * math.Pow(OutputMax/OutputMin, r.Float64()))
}

// OutputProvider is the provider the output scenario's calls go to: its
// headers are Anthropic's.
const OutputProvider = "anthropic"

// provider is the provider s's calls go to, as the failures and the
// gates' targets name it.
func (s Scenario) provider() string {
	if s.Name == Output {
		return OutputProvider
	}
	return Provider
}

// EstimateShare is a client's estimate of a prompt's input tokens as a
// share of what the provider counts: the clients estimate from a body's
// size (four bytes a token), and the provider's tokenizer reads these
// prompts (code, JSON, tool output) at about 3.2 bytes a token. The daemon
// corrects the estimates by the usage the clients read off the responses.
const EstimateShare = 0.8

// estimate is a client's estimate of a prompt of n input tokens.
func estimate(n int64) int64 { return int64(float64(n) * EstimateShare) }

// PromptTokens draws a prompt's length in input tokens.
func PromptTokens(r *rand.Rand) int64 {
	return int64(PromptMin * math.Pow(PromptMax/PromptMin, r.Float64()))
}

// Scenario scripts the provider.
type Scenario struct {
	Name string
	// Start and End bound the incident; the provider recovers at End.
	Start, End time.Duration
	Duration   time.Duration
	// DownFrom and DownTo bound policyd's absence (restart scenario only).
	DownFrom, DownTo time.Duration
	// healthy: the same run with no incident, the reference the unaffected
	// model's goodput is measured against.
	healthy bool
}

// reference is s without its incident.
func (s Scenario) reference() Scenario {
	s.healthy = true
	return s
}

// NewScenario returns the named scenario with timing t.
func NewScenario(name string, t Timing) (Scenario, error) {
	s := Scenario{Name: name, Start: t.Start, End: t.End, Duration: t.Duration}
	switch name {
	case Outage, Quota, Partial, Tokens, Classes, Output:
	case Restart:
		s.DownFrom, s.DownTo = s.Start+RestartDown, s.Start+2*RestartDown
	case Herd:
		s.End = s.Start + HerdFor
	default:
		return s, fmt.Errorf("unknown scenario %q (want outage, quota, herd, partial, restart, tokens, classes or output)", name)
	}
	if !(0 < s.Start && s.Start < s.End && s.End < s.Duration && s.DownTo < s.End) {
		return s, fmt.Errorf("scenario %s: the incident %v–%v does not fit in %v", name, s.Start, s.End, s.Duration)
	}
	return s, nil
}

// batch says whether agent i's calls are of the batch class: the batch
// agents' in the classes scenario; every call is interactive elsewhere.
func (s Scenario) batch(i int) bool {
	return s.Name == Classes && DeadlineOf(i) == BatchDeadline
}

// modelOf is agent i's model: everyone calls Model, except in the partial
// scenario, where odd agents call OtherModel.
func (s Scenario) modelOf(i int) string {
	if s.Name == Partial && i%2 == 1 {
		return OtherModel
	}
	return Model
}

// Outcome is the provider's answer to one attempt.
type Outcome struct {
	OK      bool
	Latency time.Duration
	// Failure is the failure as policyd receives it (nil on success), with
	// the status, headers and body a real OpenAI response carries.
	Failure *policydv1.Failure
	// Hint is the delay the response asks for, as the SDKs read it
	// (retry-after-ms, else retry-after); 0 when none.
	Hint time.Duration
	// Throttled: a 429.
	Throttled bool
	// Headers of a success: the rate-limit headers a client hands to its
	// gate's reports (nil when the provider sends none).
	Headers map[string]string
	// Output is the output tokens a success produced, as its usage says
	// (0: not counted; the output scenario only).
	Output int64
}

// Failure bodies, as OpenAI sends them.
const (
	overloadedBody = `{"error":{"message":"The server is overloaded or not ready yet.","type":"server_error","param":null,"code":null}}`
	tokenLimitBody = `{"error":{"message":"Rate limit reached for gpt-4o in organization org-sim on tokens per min (TPM): Limit 10800000, Used %d, Requested %d. Please try again in %s. Visit https://platform.openai.com/account/rate-limits to learn more.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`
	rateLimitBody  = `{"error":{"message":"Rate limit reached for gpt-4o in organization org-sim on requests per min (RPM): Limit 600, Used 600, Requested 1. Please try again in %s. Visit https://platform.openai.com/account/rate-limits to learn more.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`
)

// outputLimitBody is the output scenario's 429 body, as Anthropic sends it.
const outputLimitBody = `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed your organization's rate limit of 1,080,000 output tokens per minute. For details, refer to the documentation on rate limits."}}`

// provider is the modelled provider: healthy latency, and the scenario's
// incident on Model.
type provider struct {
	sc Scenario
	// the quota's token bucket (quota scenario: requests; tokens: input
	// tokens)
	tokens float64
	at     time.Duration
}

func newProvider(sc Scenario) *provider {
	switch sc.Name {
	case Tokens:
		return &provider{sc: sc, tokens: TokensPerMinute / 60}
	case Output:
		return &provider{sc: sc, tokens: OutputTokensPerMinute / 60}
	}
	return &provider{sc: sc, tokens: QuotaBurst}
}

// successLatency is lognormal with mean 2 s (σ 0.5: median 1.76 s, p99 ≈ 5.6 s).
func successLatency(r *rand.Rand) time.Duration {
	const sigma = 0.5
	mu := math.Log(2) - sigma*sigma/2
	return time.Duration(math.Exp(mu+sigma*r.NormFloat64()) * float64(time.Second))
}

// failureLatency: an error answers in about 50 ms (30–70 ms).
func failureLatency(r *rand.Rand) time.Duration {
	return time.Duration((30 + 40*r.Float64()) * float64(time.Millisecond))
}

func failure(model string, status int32, body string, headers map[string]string) *policydv1.Failure {
	return &policydv1.Failure{
		Provider:   Provider,
		Model:      model,
		Operation:  "chat.completions",
		Method:     "POST",
		HttpStatus: status,
		Headers:    headers,
		Body:       body,
		KeyId:      KeyID,
	}
}

// attempt answers an attempt of prompt input tokens, whose answer is
// output tokens long, sent at now (the answer is decided when the request
// arrives; r is the agent's latency stream).
func (p *provider) attempt(now time.Duration, model string, prompt, output int64, r *rand.Rand) Outcome {
	ok := Outcome{OK: true, Latency: successLatency(r)}
	if p.sc.Name == Output {
		ok.Output = output
	}
	if p.sc.healthy || model != Model || now < p.sc.Start || now >= p.sc.End {
		return ok
	}
	switch p.sc.Name {
	case Outage, Partial, Restart:
		return Outcome{Latency: failureLatency(r), Failure: failure(model, 503, overloadedBody, nil)}
	case Herd:
		// A window that resets at Start+HerdFor: everyone is told the same end.
		wait := time.Duration(math.Ceil((p.sc.End - now).Seconds())) * time.Second
		secs := strconv.Itoa(int(wait / time.Second))
		return Outcome{Latency: failureLatency(r), Throttled: true, Hint: wait,
			Failure: failure(model, 429, fmt.Sprintf(rateLimitBody, secs+"s"), map[string]string{"retry-after": secs})}
	case Quota, Classes:
		rate := float64(QuotaPerMinute) / 60
		if p.at < p.sc.Start {
			p.at = p.sc.Start
		}
		p.tokens = min(QuotaBurst, p.tokens+rate*(now-p.at).Seconds())
		p.at = now
		if p.tokens >= 1 {
			p.tokens--
			// OpenAI sends its rate-limit headers on every response.
			ok.Headers = map[string]string{
				"x-ratelimit-limit-requests":     strconv.Itoa(QuotaPerMinute),
				"x-ratelimit-remaining-requests": strconv.Itoa(int(p.tokens)),
			}
			return ok
		}
		next := time.Duration((1 - p.tokens) / rate * float64(time.Second))
		full := time.Duration((QuotaBurst - p.tokens) / rate * float64(time.Second))
		ms := max(next.Milliseconds(), 1)
		return Outcome{Latency: failureLatency(r), Throttled: true, Hint: time.Duration(ms) * time.Millisecond,
			Failure: failure(model, 429, fmt.Sprintf(rateLimitBody, strconv.FormatInt(ms, 10)+"ms"), map[string]string{
				"retry-after":                    strconv.Itoa(int(math.Ceil(next.Seconds()))),
				"retry-after-ms":                 strconv.FormatInt(ms, 10),
				"x-ratelimit-limit-requests":     strconv.Itoa(QuotaPerMinute),
				"x-ratelimit-remaining-requests": "0",
				"x-ratelimit-reset-requests":     full.Round(time.Millisecond).String(),
			})}
	case Tokens:
		return p.tokenAttempt(now, model, prompt, ok, r)
	case Output:
		return p.outputAttempt(now, model, output, ok, r)
	}
	return ok
}

// refillMinute tops the provider's token bucket up to now for a limit of
// perMinute tokens a minute whose bucket holds a minute's worth (the
// window started at the scenario's start), and returns its rate a second.
func (p *provider) refillMinute(now time.Duration, perMinute int) float64 {
	rate := float64(perMinute) / 60
	if p.at < p.sc.Start {
		p.at = p.sc.Start
	}
	p.tokens = min(float64(perMinute), p.tokens+rate*(now-p.at).Seconds())
	p.at = now
	return rate
}

// outputAttempt answers an attempt in the output scenario's window: a
// success takes its output from the bucket, and carries Anthropic's
// headers for its three limits; an output the bucket cannot hold is a 429
// whose retry-after (whole seconds, as Anthropic sends it) says when it
// would fit.
func (p *provider) outputAttempt(now time.Duration, model string, output int64, ok Outcome, r *rand.Rand) Outcome {
	rate := p.refillMinute(now, OutputTokensPerMinute)
	headers := func(left float64) map[string]string {
		return map[string]string{
			"anthropic-ratelimit-requests-limit":          strconv.Itoa(OutputScenarioRPM),
			"anthropic-ratelimit-requests-remaining":      strconv.Itoa(OutputScenarioRPM - 1),
			"anthropic-ratelimit-input-tokens-limit":      strconv.Itoa(OutputScenarioITPM),
			"anthropic-ratelimit-input-tokens-remaining":  strconv.Itoa(OutputScenarioITPM - PromptMax),
			"anthropic-ratelimit-output-tokens-limit":     strconv.Itoa(OutputTokensPerMinute),
			"anthropic-ratelimit-output-tokens-remaining": strconv.Itoa(int(max(left, 0))),
		}
	}
	if p.tokens >= float64(output) {
		p.tokens -= float64(output)
		ok.Headers = headers(p.tokens)
		return ok
	}
	wait := time.Duration(math.Ceil((float64(output)-p.tokens)/rate)) * time.Second
	h := headers(p.tokens)
	h["retry-after"] = strconv.Itoa(int(wait / time.Second))
	f := failure(model, 429, outputLimitBody, h)
	f.Provider, f.Operation = OutputProvider, "messages"
	return Outcome{Latency: failureLatency(r), Throttled: true, Hint: wait, Failure: f}
}

// tokenAttempt answers an attempt in the tokens scenario's window: a
// success takes its prompt from the bucket, and carries OpenAI's headers
// for both limits; a prompt the bucket cannot hold is a 429 that says when
// it would fit.
func (p *provider) tokenAttempt(now time.Duration, model string, prompt int64, ok Outcome, r *rand.Rand) Outcome {
	rate := p.refillMinute(now, TokensPerMinute)
	headers := func(left float64) map[string]string {
		return map[string]string{
			"x-ratelimit-limit-requests":     strconv.Itoa(TokenScenarioRPM),
			"x-ratelimit-remaining-requests": strconv.Itoa(TokenScenarioRPM - 1),
			"x-ratelimit-limit-tokens":       strconv.Itoa(TokensPerMinute),
			"x-ratelimit-remaining-tokens":   strconv.Itoa(int(max(left, 0))),
		}
	}
	if p.tokens >= float64(prompt) {
		p.tokens -= float64(prompt)
		ok.Headers = headers(p.tokens)
		return ok
	}
	next := time.Duration((float64(prompt) - p.tokens) / rate * float64(time.Second))
	ms := max(next.Milliseconds(), 1)
	h := headers(p.tokens)
	h["retry-after"] = strconv.Itoa(int(math.Ceil(next.Seconds())))
	h["retry-after-ms"] = strconv.FormatInt(ms, 10)
	return Outcome{Latency: failureLatency(r), Throttled: true, Hint: time.Duration(ms) * time.Millisecond,
		Failure: failure(model, 429, fmt.Sprintf(tokenLimitBody, int64(float64(TokensPerMinute)-p.tokens), prompt, strconv.FormatInt(ms, 10)+"ms"), h)}
}
