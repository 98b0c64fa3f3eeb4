package classifier

import (
	"bytes"
	"math/bits"
	"net/http"
	"strings"
	"time"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

// Bounds on what one classification reads, so that a hostile failure costs
// no more than a normal one. The server documents and enforces its own limits.
const (
	// MaxBodyBytes is how much of a body is read; the rest is ignored.
	MaxBodyBytes = 64 << 10
	// MaxCauses is how many links of a cause chain are read.
	MaxCauses = 64
	// maxTextBytes bounds each message copied into the text searched by rules.
	maxTextBytes = 8 << 10
)

// facts is what the rules look at, extracted from a Failure once per
// classification into reusable buffers (pooled, so Classify allocates little).
type facts struct {
	f        *policydv1.Failure
	profile  string
	options  optionSet
	provider []byte // lower case
	op       []byte // lower case

	kindHits bitset
	codeHits bitset

	// text holds the lower-case runtime messages, a 0 byte at split, then the
	// lower-case body messages (or body text when the body is not JSON).
	text    []byte
	split   int
	bigrams bigramSet // of text, to skip substring searches that cannot match

	now         time.Time         // what dated hints are read against: see reference
	headers     map[string]string // the response's, where reference finds its Date
	dateRead    bool              // whether the Date header was read into now
	status      int32             // http_status, else the one the runtime message states
	lastKind    string            // the kind addKind marked last
	nameHits    bitset            // blocks whose name condition error_name satisfies
	scratch     []byte            // lower-casing one kind at a time
	hint        delayHint
	shouldRetry int8  // x-should-retry: 0 absent, 1 true, -1 false
	retryFlag   int8  // a "retriable: true|false" the response's text states
	grpc        int32 // grpc_code, else the one the text states
	bodyStatus  int32 // the first 4xx or 5xx numeric "code" in the body
	// upstreamStatus is the first 4xx a body's status field states
	// ("statusCode": 400 in a gateway's error details).
	upstreamStatus int32
	// pushbackStop: grpc-retry-pushback-ms was negative or not a number,
	// the server's way to say "do not retry" (gRFC A6).
	pushbackStop bool
	toolError    bool // an MCP tool result with "isError" (or "is_error"): true
	digits       bool // text holds a digit

	resets [4]resetHeader
	nreset int
}

// resetHeader is one rate-limit reset header with its remaining count.
type resetHeader struct {
	limit     rateLimitName
	delay     time.Duration
	exhausted bool // the matching x-ratelimit-remaining* header is 0
}

type bitset []uint64

func (b bitset) set(i int)      { b[i>>6] |= 1 << (uint(i) & 63) }
func (b bitset) has(i int) bool { return b[i>>6]&(1<<(uint(i)&63)) != 0 }

func (fx *facts) reset(nblocks int) {
	words := (nblocks + 63) / 64
	if cap(fx.kindHits) < words {
		fx.kindHits = make(bitset, words)
		fx.codeHits = make(bitset, words)
	}
	if cap(fx.nameHits) < words {
		fx.nameHits = make(bitset, words)
	}
	fx.kindHits = fx.kindHits[:words]
	fx.codeHits = fx.codeHits[:words]
	fx.nameHits = fx.nameHits[:words]
	clear(fx.kindHits)
	clear(fx.codeHits)
	clear(fx.nameHits)
	fx.text = fx.text[:0]
	fx.provider = fx.provider[:0]
	fx.op = fx.op[:0]
	fx.hint = delayHint{}
	fx.lastKind = ""
	fx.shouldRetry = 0
	fx.retryFlag = 0
	fx.grpc = 0
	fx.bodyStatus = 0
	fx.upstreamStatus = 0
	fx.pushbackStop = false
	fx.toolError = false
	fx.nreset = 0
	fx.f = nil
}

// load extracts the facts of f.
func (c *Classifier) load(fx *facts, f *policydv1.Failure, opts *policydv1.ClassifyOptions, profile string, now time.Time) {
	fx.f = f
	fx.profile = profile
	fx.options = 0
	if opts.GetRetryFetchErrors() {
		fx.options |= optRetryFetchErrors
	}
	fx.provider = appendLower(fx.provider, f.GetProvider(), 256)
	fx.op = appendLower(fx.op, f.GetOperation(), 256)
	// A dated hint is relative to the server's clock when the response says
	// what it is (the agent's own clock may be skewed); the Date header is
	// found and parsed only when a dated hint needs it.
	fx.now, fx.headers, fx.dateRead = now, f.GetHeaders(), false

	// Runtime kinds, codes and messages: the error and its cause chain.
	c.addName(fx, f.GetErrorName(), true)
	c.addKind(fx, f.GetErrorCode(), true)
	// Wrappers print the exception's class before its message
	// ("litellm.NotFoundError: ...", "ThrottlingException: ..."): a name,
	// as if the runtime had sent it.
	if name := leadingClassName(f.GetMessage()); name != "" {
		c.addName(fx, name, true)
	}
	fx.text = appendLower(fx.text, f.GetMessage(), maxTextBytes)
	for i, cause := range f.GetCauses() {
		if i == MaxCauses {
			break
		}
		c.addName(fx, cause.GetName(), false)
		c.addKind(fx, cause.GetCode(), true)
		fx.text = append(fx.text, '\n')
		fx.text = appendLower(fx.text, cause.GetMessage(), maxTextBytes)
	}
	fx.split = len(fx.text)
	fx.text = append(fx.text, 0)

	c.loadHeaders(fx, f.GetHeaders())
	if body := f.GetBody(); body != "" {
		c.loadBody(fx, body)
	} else {
		// No body: the runtime may have printed the error object into its
		// message or a cause's.
		c.loadEmbeddedBody(fx, f.GetMessage(), 1)
		for i, cause := range f.GetCauses() {
			if i == MaxCauses {
				break
			}
			c.loadEmbeddedBody(fx, cause.GetMessage(), 1)
		}
	}
	fx.bigrams.build(fx.text)
	// Statuses, codes, delays and zero limits are all numbers: a text with
	// no digit (most network errors) skips their searches.
	fx.digits = hasDigit(fx.text)
	c.loadStructure(fx, f)
	// botocore prints the service's error code only into its message:
	// "An error occurred (ThrottlingException) when calling the ... operation".
	if code, ok := botocoreCode(fx.text); ok {
		c.addKind(fx, code, false)
	}
	// openai-python 0.x logs its errors as key=value pairs: "error_code=None
	// error_message='...' error_type=server_error". Its code and type are kinds.
	if logfmtError.maybeIn(&fx.bigrams) {
		c.addLogfmtKinds(fx)
	}
	fx.retryFlag = retryableFlag(fx.text)
	if fx.digits && zeroLimit(fx.text) {
		c.addKind(fx, KindQuotaLimitZero, false)
	}

	// Delay phrases in messages come last in trust: "Please retry in 20s".
	if fx.digits && (fx.hint.source == hintNone || fx.hint.source > hintBodyPhrase) {
		fx.hint.offer(phraseDelay(fx.text, &fx.bigrams))
	}
	// A wait of hours that the response states in its text is a quota's,
	// not a throttle's.
	if (fx.hint.source == hintBodyField || fx.hint.source == hintBodyPhrase) && fx.hint.delay >= longWait {
		c.addKind(fx, KindLongWait, false)
	}
}

// KindLongWait is the kind a failure gets when its body or message states a
// wait of an hour or more ("Expected available in 5 hours"): a quota that
// resets, not a rate limit worth waiting for.
const KindLongWait = "long_wait"

const longWait = time.Hour

func phraseDelay(text []byte, bigrams *bigramSet) (time.Duration, bool, int) {
	d, ok := parseDelayPhrase(text, bigrams)
	return d, ok, hintBodyPhrase
}

// loadStructure reads what the text states in a structured form when the
// failure's own fields lack it: an HTTP status ("Error 400 ...", a body's
// numeric code), a gRPC status, a JSON-RPC error code.
func (c *Classifier) loadStructure(fx *facts, f *policydv1.Failure) {
	fx.status = f.GetHttpStatus()
	if fx.status == 0 {
		fx.status = statusCode(f.GetErrorCode())
	}
	if fx.status == 0 {
		if fx.digits {
			fx.status = statusFromText(fx.text[:fx.split])
		} else {
			fx.status = statusFromReason(fx.text[:fx.split])
		}
	}
	// A 200 whose body is an error object (OpenRouter and proxies relay an
	// upstream's 429 so) says nothing about the failure with its status:
	// the error object's code does.
	if fx.status == 0 || (fx.status == 200 && f.GetBody() != "") {
		if fx.bodyStatus != 0 {
			fx.status = fx.bodyStatus
		}
	}
	// A gateway's 5xx whose body states a 4xx in a status field (Helicone's
	// 500 with "details": [{"statusCode": 400, ...}]): the upstream refused
	// the request, and the gateway's own status says only that it relayed
	// a failure.
	if fx.status >= 500 && fx.status <= 599 && fx.upstreamStatus != 0 {
		fx.status = fx.upstreamStatus
	}
	// An application's 5xx whose own words open with the upstream's 4xx
	// (Flowise's 500 "... InsufficientQuotaError: 429 You exceeded your
	// current quota", a web app's 500 {"message": "429 Rate limit is
	// exceeded. Try again in 11 seconds."}): the status it relays, as above.
	if fx.status >= 500 && fx.status <= 599 && fx.digits {
		if s := relayedStatus(fx); s != 0 {
			fx.status = s
		}
	}
	// A failure that got an HTTP response is not an upstream gRPC call's.
	fx.grpc = f.GetGrpcCode()
	if fx.grpc == 0 && f.GetHttpStatus() == 0 {
		fx.grpc = grpcFromText(fx.text, &fx.bigrams, fx.digits)
	}
	if fx.grpc == 0 && f.GetHttpStatus() == 0 {
		fx.grpc = grpcLeadingName(fx.text[:fx.split], f.GetErrorName())
	}
	if !fx.digits {
		return
	}
	if code, ok := jsonrpcFromText(fx.text[:fx.split]); ok {
		c.addJSONRPC(fx, code)
	}
}

// relayedStatus is the first 4xx the runtime message, else the body's
// messages, state as a status (see statusFromText), or 0. A 5xx stated
// before it is the relay's own ("HTTP 500 Internal Server Error from
// https://... Error in Continue free trial server: 429 You exceeded your
// current quota").
func relayedStatus(fx *facts) int32 {
	if s := status4xxFromText(fx.text[:fx.split]); s != 0 {
		return s
	}
	if fx.split+1 < len(fx.text) {
		return status4xxFromText(fx.text[fx.split+1:])
	}
	return 0
}

// addName marks the blocks an exception or class name satisfies, with and
// without its module or package prefix: "openai.APITimeoutError",
// "botocore.exceptions.ReadTimeoutError", "java.net.SocketTimeoutException"
// and "*net.OpError" also match APITimeoutError, ReadTimeoutError,
// SocketTimeoutException and OpError. top is the failure's own error_name,
// which name conditions look at.
func (c *Classifier) addName(fx *facts, s string, top bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return
	}
	c.addKind(fx, s, false)
	if top {
		c.names.mark(fx.nameHits, fx.scratch)
	}
	short := s
	if short[0] == '*' || short[0] == '&' {
		short = strings.TrimLeft(short, "*&")
	}
	for i := len(short) - 1; i >= 0; i-- {
		if c := short[i]; c == '.' || c == ':' || c == '$' || c == '/' {
			short = short[i+1:]
			break
		}
	}
	if short != "" && short != s {
		c.addKind(fx, short, false)
		if top {
			c.names.mark(fx.nameHits, fx.scratch)
		}
	}
	// A class named for a connection error is one, whatever its prefix:
	// the SDKs name theirs APIConnectionError, ClientConnectionError,
	// RequestConnectionError and so on, and a prefix we have not listed
	// says no less. The capital C keeps "DisconnectionError" out.
	if n := len(short); n > len(connectionErrorName) && short[n-len(connectionErrorName):] == connectionErrorName {
		c.addKind(fx, connectionErrorName, false)
	}
}

// connectionErrorName is the class-name suffix addName reads as a
// connection error (default_rules.yaml lists it among network_kinds).
const connectionErrorName = "ConnectionError"

// problemJSON reports whether the response's Content-Type is RFC 9457's
// application/problem+json.
func (fx *facts) problemJSON() bool {
	return strings.Contains(strings.ToLower(headerValue(fx.headers, "content-type")), "problem+json")
}

// serverDate returns the response's Date header, or "".
func serverDate(headers map[string]string) string { return headerValue(headers, "date") }

// headerValue returns the value of the header named name (lower case) in
// any spelling, or "".
func headerValue(headers map[string]string, name string) string {
	for n, v := range headers {
		if len(n) == len(name) && strings.EqualFold(n, name) {
			return v
		}
	}
	return ""
}

// reference is the time dated hints are read against: the response's Date
// when it has a valid one, else the classifier's clock.
func (fx *facts) reference() time.Time {
	if !fx.dateRead {
		fx.dateRead = true
		if date := serverDate(fx.headers); date != "" {
			if t, err := http.ParseTime(strings.TrimSpace(date)); err == nil {
				fx.now = t
			}
		}
	}
	return fx.now
}

// addKind lower-cases s and marks the blocks whose kind (and, for codes,
// code) conditions it satisfies.
func (c *Classifier) addKind(fx *facts, s string, isCode bool) {
	if s == "" {
		return
	}
	// Cause chains repeat their wrappers ("Error", "Error", ...): a kind
	// just marked marks nothing new.
	if s == fx.lastKind && !isCode {
		return
	}
	fx.lastKind = s
	fx.scratch = appendLower(fx.scratch[:0], s, 256)
	c.kinds.mark(fx.kindHits, fx.scratch)
	if isCode {
		c.codes.mark(fx.codeHits, fx.scratch)
	}
}

func (p *patternIndex) mark(hits bitset, lower []byte) {
	for _, b := range p.exact[string(lower)] {
		hits.set(b)
	}
	if len(p.globs) == 0 {
		return
	}
	have := bigramMask(lower)
	for _, i := range p.noBigram {
		p.markGlob(hits, i, have, lower)
	}
	for m := have; m != 0; m &= m - 1 {
		for _, i := range p.byBigram[bits.TrailingZeros64(m)] {
			p.markGlob(hits, i, have, lower)
		}
	}
}

// markGlob sets the blocks of glob i when lower, whose byte pairs are have,
// matches it.
func (p *patternIndex) markGlob(hits bitset, i int32, have uint64, lower []byte) {
	g := &p.globs[i]
	if g.glob.need&have == g.glob.need && g.glob.match(lower) {
		for _, b := range g.blocks {
			hits.set(b)
		}
	}
}

// hintHeaderLen marks the lengths of the header names loadHeaders reads
// one by one (retry-after, retry-after-ms, x-amz-retry-after,
// grpc-retry-pushback-ms, x-should-retry, x-amzn-errortype,
// x-ms-error-code): a name of another length is compared with none of
// them, only read as a rate-limit header.
var hintHeaderLen = func() (m [32]bool) {
	for _, n := range []string{"retry-after", "retry-after-ms", "x-amz-retry-after", "grpc-retry-pushback-ms",
		"x-should-retry", "x-amzn-errortype", "x-ms-error-code"} {
		m[len(n)] = true
	}
	return m
}()

// rateLimitHeader reads a rate-limit header in any spelling
// (x-ratelimit-reset-tokens, x-rate-limit-reset, the IETF draft's
// RateLimit-Reset, anthropic-ratelimit-tokens-reset,
// x-ratelimit-reset-tokens-minute): a reset is a hint, a remaining count
// of 0 names a used-up limit (zero, n).
func (fx *facts) rateLimitHeader(name, v string, zero *[4]rateLimitName, n *int) {
	rl, ok := rateLimitHeader(name)
	if !ok {
		return
	}
	switch {
	case rl.what == "reset":
		if fx.nreset < len(fx.resets) {
			if d, ok := ParseRateLimitReset(v, fx.reference()); ok && d <= MaxDelayHint {
				fx.resets[fx.nreset] = resetHeader{limit: rl, delay: d}
				fx.nreset++
			}
		}
	case strings.TrimSpace(v) == "0" && *n < len(zero):
		zero[*n] = rl
		*n++
	}
}

// loadHeaders reads delay hints, x-should-retry and AWS's error type.
func (c *Classifier) loadHeaders(fx *facts, headers map[string]string) {
	var remainingZero [4]rateLimitName
	nzero := 0
	for name, v := range headers {
		switch {
		case !hintHeaderLen[min(len(name), len(hintHeaderLen)-1)]:
			// None of the names below has its length (most headers): only
			// a rate-limit header may be one of ours.
			fx.rateLimitHeader(name, v, &remainingZero, &nzero)
		case strings.EqualFold(name, "retry-after-ms"):
			d, ok := ParseMillis(v)
			fx.hint.offer(d, ok, hintRetryAfterMs)
		case strings.EqualFold(name, "retry-after"):
			d, ok := ParseRetryAfter(v, fx.reference())
			fx.hint.offer(d, ok, hintRetryAfter)
		case strings.EqualFold(name, "x-amz-retry-after"):
			d, ok := ParseMillis(v)
			fx.hint.offer(d, ok, hintAmzRetryAfter)
		case strings.EqualFold(name, "grpc-retry-pushback-ms"):
			// gRFC A6: a negative or unparsable pushback asks not to retry.
			d, ok := ParseMillis(v)
			fx.hint.offer(d, ok, hintGRPCPushback)
			fx.pushbackStop = !ok
		case strings.EqualFold(name, "x-should-retry"):
			switch strings.ToLower(strings.TrimSpace(v)) {
			case "true":
				fx.shouldRetry = 1
			case "false":
				fx.shouldRetry = -1
			}
		case strings.EqualFold(name, "x-amzn-errortype"):
			kind, _, _ := strings.Cut(v, ":")
			c.addKind(fx, kind, false)
		case strings.EqualFold(name, "x-ms-error-code"):
			c.addKind(fx, v, false)
		default:
			fx.rateLimitHeader(name, v, &remainingZero, &nzero)
		}
	}
	if nzero > 0 {
		// A used-up limit answered with a 403 (GitHub's primary rate limit)
		// says so only in its headers.
		c.addKind(fx, KindRateLimitRemainingZero, false)
	}
	if fx.nreset == 0 {
		return
	}
	// Prefer the reset of a limit that is used up; else the longest reset.
	var best time.Duration
	found, anyExhausted := false, false
	for i := 0; i < fx.nreset; i++ {
		r := &fx.resets[i]
		for _, s := range remainingZero[:nzero] {
			if s.sameLimit(r.limit) {
				r.exhausted = true
			}
		}
		anyExhausted = anyExhausted || r.exhausted
	}
	for i := 0; i < fx.nreset; i++ {
		r := fx.resets[i]
		if anyExhausted && !r.exhausted {
			continue
		}
		if !found || r.delay > best {
			best, found = r.delay, true
		}
	}
	fx.hint.offer(best, found, hintRateLimitReset)
}

// loadBody reads a provider's error payload: kinds (error code, type,
// status, AWS __type, Google ErrorInfo reasons and QuotaFailure ids), the
// error messages, and delay fields. A body that is not JSON is read as text.
func (c *Classifier) loadBody(fx *facts, body string) {
	if body == "" {
		return
	}
	if len(body) > MaxBodyBytes {
		body = body[:MaxBodyBytes]
	}
	if !looksLikeJSON(body) {
		fx.text = appendLower(fx.text, body, maxTextBytes)
		// AWS query and REST-XML protocols: <Error><Code>Throttling</Code>.
		if code, ok := xmlErrorCode(body); ok {
			c.addKind(fx, code, false)
		}
		return
	}
	c.scanErrorJSON(fx, body, true, 0)
}

// maxEmbedDepth is how many error objects deep, each printed into the
// message of the one around it, the kinds are read: gemini-cli prints the
// API's error, whose message is Google's whole error object as escaped JSON.
const maxEmbedDepth = 2

// scanErrorJSON reads a provider's error payload: its kinds (error code,
// type, status, AWS __type, Google ErrorInfo reasons and QuotaFailure ids)
// and delay fields, and, withText, its messages into the text rules search.
// depth is how many printed error objects deep doc sits.
func (c *Classifier) scanErrorJSON(fx *facts, doc string, withText bool, depth int) {
	text := func(value string) {
		if withText {
			fx.text = append(fx.text, '\n')
			fx.text = appendLower(fx.text, value, maxTextBytes)
		}
	}
	toolError := false
	embedded := "" // the first message that prints an error object of its own
	scanJSONKeys(doc, func(key, value string, isString bool) {
		switch key {
		case "code", "Code":
			// Tencent Cloud API 3.0 (and Alibaba Cloud) spell it "Code", and
			// file a code under its category: "RequestLimitExceeded.IPLimitExceeded",
			// "AuthFailure.SecretIdNotFound". The category is a kind too.
			c.addKind(fx, value, false)
			if isString {
				if i := strings.IndexByte(value, '.'); i > 0 {
					c.addKind(fx, value[:i], false)
				}
			}
			if !isString {
				c.numericCode(fx, value)
			} else if s := statusCode(value); s != 0 && fx.bodyStatus == 0 {
				// Azure writes the status as a string: {"error": {"code": "401", ...}}.
				fx.bodyStatus = s
			}
		case "statusCode", "status_code", "httpStatus", "http_status", "httpStatusCode":
			// A numeric status a proxy or SDK wrote into the body.
			if !isString {
				c.numericCode(fx, value)
				if s, ok := threeDigits([]byte(value)); ok && s < 500 && len(value) == 3 && fx.upstreamStatus == 0 {
					fx.upstreamStatus = s
				}
			}
		case "isError", "is_error":
			// MCP's tool result, and Anthropic's tool_result and
			// mcp_tool_result blocks (is_error).
			toolError = value == "true"
		case "status":
			c.addKind(fx, value, false)
			if !isString {
				c.numericCode(fx, value)
			}
		case "type", "reason", "quotaId", "error_code", "errorCode", "quota_limit", "quota_metric", "finishReason":
			c.addKind(fx, value, false)
		case "blockReason":
			// Gemini's promptFeedback.blockReason: the prompt was blocked,
			// whatever reason it names.
			c.addKind(fx, value, false)
			if value != "" && value != "BLOCK_REASON_UNSPECIFIED" {
				c.addKind(fx, KindPromptBlocked, false)
			}
		case "__type":
			if i := strings.LastIndexByte(value, '#'); i >= 0 {
				value = value[i+1:]
			}
			kind, _, _ := strings.Cut(value, ":")
			c.addKind(fx, kind, false)
		// Portkey's gateway relays an upstream's body that is not JSON as
		// {"html-message": "..."}.
		// Stability AI: {"name": "content_moderation", "errors": ["Your
		// request was flagged ..."]}. MiniMax answers every failure with
		// {"base_resp": {"status_code": 1002, "status_msg": "rate limit"}},
		// often in an HTTP 200.
		// Deepgram: {"err_code": "Bad Request", "err_msg": "..."}; Baidu's
		// SDKs: {"errorCode": 18, "errorMsg": "[18] Open api qps request
		// limit reached"}.
		case "message", "Message", "detail", "error_description", "msg", "errorMessage", "error_msg", "errorMsg", "err_msg", "errmsg", "error_message",
			"html-message", "errors", "status_msg":
			text(value)
			if depth < maxEmbedDepth && embedded == "" && strings.IndexByte(value, '{') >= 0 {
				embedded = value
			}
		case "details":
			// Explorium: {"details": "You have insufficient credits ..."}.
			// (Google's "details" is an array of typed objects, read above
			// by their keys.)
			if isString {
				text(value)
			}
		case "title":
			// RFC 9457 problem details: the title is the problem's summary
			// ("You do not have enough credit"), read only when the
			// response says it is one.
			if isString && depth == 0 && fx.problemJSON() {
				text(value)
			}
		case "error":
			// {"error": "rate_limited"}: both a kind and a message.
			if isString {
				c.addKind(fx, value, false)
				text(value)
			}
		case "quota_limit_value":
			if strings.TrimSpace(value) == "0" {
				c.addKind(fx, KindQuotaLimitZero, false)
			}
		case "retryDelay":
			d, ok := ParseGoogleDuration(value)
			fx.hint.offer(d, ok, hintBodyField)
		case "estimated_time": // Hugging Face: a model still loading, seconds
			d, ok := seconds(value, time.Second)
			fx.hint.offer(d, ok, hintBodyField)
		case "retry_after_ms", "retryAfterMs":
			d, ok := ParseMillis(value)
			fx.hint.offer(d, ok, hintBodyField)
		case "retry_after", "retryAfter":
			d, ok := ParseRetryAfter(value, fx.reference())
			fx.hint.offer(d, ok, hintBodyField)
		}
	})
	// A relay's message that prints the upstream's error ("Error code: 404 -
	// {'type': 'error', 'error': {'type': 'not_found_error', ...}}" in a
	// batch's result line, a gateway's wrapped error): its kinds, as for a
	// runtime message, after the body's own so that its status comes second.
	if embedded != "" {
		c.loadEmbeddedBody(fx, embedded, depth+1)
	}
	// An MCP tool result that failed ("isError": true): its content's text
	// is the error message. Rare, so read in a second pass.
	if toolError && !fx.toolError {
		fx.toolError = true
		c.addKind(fx, KindToolError, false)
		scanJSONKeys(doc, func(key, value string, isString bool) {
			if key == "text" && isString {
				text(value)
				// A tool that relays an HTTP failure says its status in
				// its text ("HTTP 429"): the status the rules read.
				if fx.bodyStatus == 0 && len(value) < 256 {
					fx.bodyStatus = statusFromText([]byte(strings.ToLower(value)))
				}
			}
		})
	}
}

// numericCode reads a body's numeric "code": an HTTP status (Google's
// {"error": {"code": 429, ...}}, OpenAI-shaped errors of self-hosted
// servers) or a JSON-RPC error code.
func (c *Classifier) numericCode(fx *facts, value string) {
	if code, ok := jsonrpcCode([]byte(value)); ok {
		c.addJSONRPC(fx, code)
		return
	}
	if s, ok := threeDigits([]byte(value)); ok && len(value) == 3 && fx.bodyStatus == 0 {
		fx.bodyStatus = s
	}
}

// retryableFlag reads a server's own "Retriable: false" (Azure Resource
// Manager's messages) or "retryable": true in lower-case text: 1, -1, or 0
// when the text says neither.
func retryableFlag(text []byte) int8 {
	if !bytes.Contains(text, []byte("retriable")) && !bytes.Contains(text, []byte("retryable")) {
		return 0
	}
	for _, f := range [...]struct {
		phrase []byte
		v      int8
	}{
		{[]byte("retriable: false"), -1}, {[]byte("retryable: false"), -1},
		{[]byte("\"retryable\":false"), -1}, {[]byte("\"retryable\": false"), -1},
		{[]byte("retriable: true"), 1}, {[]byte("retryable: true"), 1},
		{[]byte("\"retryable\":true"), 1}, {[]byte("\"retryable\": true"), 1},
	} {
		if bytes.Contains(text, f.phrase) {
			return f.v
		}
	}
	return 0
}

// KindRateLimitRemainingZero is the kind a failure gets when an
// x-ratelimit-remaining* header is 0.
const KindRateLimitRemainingZero = "limit_remaining_zero"

// KindQuotaLimitZero is the kind a failure gets when its text states a
// quota of zero ("limit: 0", not "limit: 0.5"): no wait frees a quota of
// zero. Rules match it like any other kind.
const KindQuotaLimitZero = "quota_limit_zero"

// zeroLimit reports whether text holds "limit:" followed by a zero that is
// not the start of another number, as gemini-cli's /limit:\s*0(?!\d|\.\d)/,
// or Google's ErrorInfo metadata stating a quota_limit_value of "0" (in
// protobuf text, `key: "quota_limit_value" value: "0"`, or in JSON,
// `"quota_limit_value": "0"`).
func zeroLimit(text []byte) bool {
	// One pass over the text for "limit", the word both forms share.
	rest := text
	for {
		i := bytes.Index(rest, []byte("limit"))
		if i < 0 {
			return false
		}
		quotaValue := i >= len("quota_") && string(rest[i-len("quota_"):i]) == "quota_" &&
			bytes.HasPrefix(rest[i+len("limit"):], []byte("_value"))
		rest = rest[i+len("limit"):]
		switch {
		case quotaValue:
			if zeroLimitValue(rest[len("_value"):]) {
				return true
			}
		case len(rest) > 0 && rest[0] == ':':
			if zeroAfterColon(rest[1:]) {
				return true
			}
		}
	}
}

// zeroAfterColon reports whether rest, what follows "limit:", is a zero
// that is not the start of another number.
func zeroAfterColon(rest []byte) bool {
	j := 0
	for j < len(rest) && (rest[j] == ' ' || rest[j] == '\t') {
		j++
	}
	if j >= len(rest) || rest[j] != '0' {
		return false
	}
	next := rest[j+1:]
	digit := func(k int) bool { return k < len(next) && next[k] >= '0' && next[k] <= '9' }
	return !digit(0) && !(len(next) > 0 && next[0] == '.' && digit(1))
}

// zeroLimitValue reports whether rest, what follows the key
// quota_limit_value, states a value of "0".
func zeroLimitValue(rest []byte) bool {
	// Skip the quotes, separators and protobuf's "value" word between the
	// key and its value: `" value: "` or `": "`.
	j := 0
	for j < len(rest) && j < 16 && strings.IndexByte("\"\\ :\tvalue", rest[j]) >= 0 {
		j++
	}
	return j > 0 && rest[j-1] == '"' && j+1 < len(rest) && rest[j] == '0' && (rest[j+1] == '"' || rest[j+1] == '\\')
}

// botocoreCode reads the code of botocore's "an error occurred (code)" in
// lower-case text.
func botocoreCode(text []byte) (string, bool) {
	const prefix = "an error occurred ("
	i := bytes.Index(text, []byte(prefix))
	if i < 0 {
		return "", false
	}
	rest := text[i+len(prefix):]
	j := bytes.IndexByte(rest, ')')
	if j <= 0 || j > 128 || bytes.ContainsAny(rest[:j], " \n") {
		return "", false
	}
	return string(rest[:j]), true
}

// logfmtError is the key prefix addLogfmtKinds reads; logfmtKeys the keys.
var (
	logfmtError = newSubstring("error_")
	logfmtKeys  = [...][]byte{[]byte("error_type="), []byte("error_code=")}
)

// addLogfmtKinds reads the error_type= and error_code= values of a
// key=value log line in the lower-case text as kinds ("none" is no value).
func (c *Classifier) addLogfmtKinds(fx *facts) {
	for _, key := range logfmtKeys {
		i := bytes.Index(fx.text, key)
		if i < 0 || (i > 0 && isLogfmtByte(fx.text[i-1])) {
			continue
		}
		rest := fx.text[i+len(key):]
		if len(rest) > 0 && (rest[0] == '\'' || rest[0] == '"') {
			rest = rest[1:]
		}
		j := 0
		for j < len(rest) && j < 128 && isLogfmtByte(rest[j]) {
			j++
		}
		if v := string(rest[:j]); v != "" && v != "none" {
			c.addKind(fx, v, false)
		}
	}
}

// isLogfmtByte reports whether c may be part of a lower-case key or bare value.
func isLogfmtByte(c byte) bool {
	return c == '_' || c == '-' || c == '.' || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
}

// xmlErrorCode reads the first <Code> element of an XML error body.
func xmlErrorCode(body string) (string, bool) {
	_, rest, ok := strings.Cut(body, "<Code>")
	if !ok {
		return "", false
	}
	code, _, ok := strings.Cut(rest, "</Code>")
	code = strings.TrimSpace(code)
	if !ok || code == "" || len(code) > 128 || strings.ContainsAny(code, "<>") {
		return "", false
	}
	return code, true
}

// loadEmbeddedBody reads the error envelope a runtime printed into its
// message when the failure carries no body ("Error code: 401 - {...}",
// "received error while streaming: {...}"): its kinds and delay fields, as
// for a body. A Python dict's repr is read with its quotes swapped, and
// escaped JSON unescaped. depth counts the printed objects this one sits
// in, itself included.
func (c *Classifier) loadEmbeddedBody(fx *facts, message string, depth int) {
	i := strings.IndexByte(message, '{')
	if i < 0 {
		return
	}
	doc := message[i:]
	if len(doc) > MaxBodyBytes {
		doc = doc[:MaxBodyBytes]
	}
	switch {
	case strings.HasPrefix(doc[skipEscapedSpace(doc, 1):], `\"`):
		// Escaped JSON ({\"error\": ...}): the message was a JSON string's
		// value, as a body's message is.
		doc = strings.ReplaceAll(doc, `\"`, `"`)
	case !strings.Contains(doc, "\"") && strings.Contains(doc, "'"):
		doc = strings.ReplaceAll(doc, "'", "\"")
	}
	// The message itself is already in the text rules search.
	c.scanErrorJSON(fx, doc, false, depth)
}

// skipEscapedSpace skips white space and its JSON escapes (a pretty-printed
// object inside a JSON string reads "{\n  \"error\": ...").
func skipEscapedSpace(doc string, i int) int {
	for {
		i = skipSpace(doc, i)
		if i+1 < len(doc) && doc[i] == '\\' && (doc[i+1] == 'n' || doc[i+1] == 'r' || doc[i+1] == 't') {
			i += 2
			continue
		}
		return i
	}
}

// appendLower appends s, ASCII lower-cased, to dst, at most limit bytes of it.
func appendLower(dst []byte, s string, limit int) []byte {
	if len(s) > limit {
		s = s[:limit]
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}

// rateLimitName is a rate-limit header's name split around its "reset" or
// "remaining": the two halves name the limit, so that
// x-ratelimit-reset-tokens and x-ratelimit-remaining-tokens, or
// anthropic-ratelimit-tokens-reset and anthropic-ratelimit-tokens-remaining,
// are about the same limit.
type rateLimitName struct {
	what          string // "reset" or "remaining"
	before, after string
}

func (a rateLimitName) sameLimit(b rateLimitName) bool {
	return strings.EqualFold(a.before, b.before) && strings.EqualFold(a.after, b.after)
}

// rateLimitHeader reads a header name that holds "ratelimit" or
// "rate-limit" and then "reset" or "remaining".
func rateLimitHeader(name string) (rateLimitName, bool) {
	i := indexFold(name, "ratelimit")
	n := len("ratelimit")
	if i < 0 {
		if i = indexFold(name, "rate-limit"); i < 0 {
			return rateLimitName{}, false
		}
		n = len("rate-limit")
	}
	rest := name[i+n:]
	for _, what := range [...]string{"reset", "remaining"} {
		if j := indexFold(rest, what); j >= 0 {
			k := i + n + j
			return rateLimitName{what: what, before: name[:k], after: name[k+len(what):]}, true
		}
	}
	return rateLimitName{}, false
}

// indexFold is strings.Index for an ASCII lower-case sub, ignoring case in s.
func indexFold(s, sub string) int {
	first := sub[0]
	for i := 0; i+len(sub) <= len(s); i++ {
		if c := s[i]; c != first && c+('a'-'A') != first {
			continue
		}
		if strings.EqualFold(s[i:i+len(sub)], sub) {
			return i
		}
	}
	return -1
}

// hasDigit reports whether text holds an ASCII digit.
func hasDigit(text []byte) bool {
	for _, c := range text {
		if c-'0' < 10 {
			return true
		}
	}
	return false
}

// KindPromptBlocked is the kind of a response whose promptFeedback names a
// blockReason: the prompt was refused, whatever the reason's name.
const KindPromptBlocked = "prompt_blocked"

// leadingClassName returns the exception class name a message starts with
// ("litellm.ServiceUnavailableError: ...", "openai.APIConnectionError: ",
// "ThrottlingException: "): dotted identifier characters up to ": ", ending
// in Error, Exception or Timeout. "" when the message starts otherwise.
func leadingClassName(msg string) string {
	const maxName = 96
	for i := 0; i < len(msg) && i < maxName; i++ {
		c := msg[i]
		if c == ':' {
			name := msg[:i]
			if i+1 < len(msg) && msg[i+1] == ' ' && hasClassSuffix(name) {
				return name
			}
			return ""
		}
		if !(c == '.' || c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (i > 0 && c >= '0' && c <= '9')) {
			return ""
		}
	}
	return ""
}

func hasClassSuffix(name string) bool {
	for _, suffix := range [...]string{"Error", "Exception", "Timeout"} {
		if len(name) > len(suffix) && name[len(name)-len(suffix):] == suffix {
			return true
		}
	}
	return name == "Timeout"
}
