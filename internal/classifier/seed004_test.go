package classifier

import (
	"testing"
	"time"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

// Seed 004 (docs/seeds.md): every provider payload example in the document, each with the
// status it came with, plus Bedrock's exception names.
func TestSeed004ProviderPayloads(t *testing.T) {
	t.Parallel()
	p := func(provider string, status int32, body string) *policydv1.Failure {
		return &policydv1.Failure{Provider: provider, Operation: "chat", HttpStatus: status, Body: body}
	}
	runClassifyCases(t, []classifyCase{
		// OpenAI
		{name: "openai rate limit", failure: p("openai", 429, `{"error":{"message":"Rate limit reached for gpt-4 in organization org-xxx on requests per min (RPM): Limit 10, Used 10, Requested 1.","type":"requests","code":"rate_limit_exceeded"}}`),
			wantType: typeRateLimit, wantRetryable: true, wantRule: "rate_limit.per_minute"},
		{name: "openai server error", failure: p("openai", 500, `{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","code":"server_error"}}`),
			wantType: typeServerError, wantRetryable: true, wantRule: "server_error"},
		{name: "openai overloaded", failure: p("openai", 503, `{"error":{"message":"The engine is currently overloaded, please try again later.","type":"server_error","code":"overloaded"}}`),
			wantType: typeOverloaded, wantRetryable: true, wantRule: "overloaded"},
		{name: "openai invalid key", failure: p("openai", 401, `{"error":{"message":"Incorrect API key provided: sk-xxx. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","code":"invalid_api_key"}}`),
			wantType: typeAuth, wantRetryable: false, wantRule: "auth.invalid"},
		{name: "openai context too long", failure: p("openai", 400, `{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 12847 tokens. Please reduce the length of the messages.","type":"invalid_request_error","code":"context_length_exceeded"}}`),
			wantType: typeContextTooLong, wantRetryable: false, wantRule: "context_too_long"},
		{name: "openai quota exhausted 429", failure: p("openai", 429, `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","code":"insufficient_quota"}}`),
			wantType: typeQuota, wantRetryable: false, wantRule: "quota.exhausted"},
		{name: "openai content policy", failure: p("openai", 400, `{"error":{"message":"Your request was rejected as a result of our safety system.","type":"invalid_request_error","code":"content_policy_violation"}}`),
			wantType: typeContentPolicy, wantRetryable: false, wantRule: "content_policy"},

		// Anthropic
		{name: "anthropic rate limit", failure: p("anthropic", 429, `{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}`),
			wantType: typeRateLimit, wantRetryable: true, wantRule: "rate_limit.per_minute"},
		{name: "anthropic overloaded 529", failure: p("anthropic", 529, `{"type":"error","error":{"type":"overloaded_error","message":"Anthropic's API is temporarily overloaded"}}`),
			wantType: typeOverloaded, wantRetryable: true, wantRule: "overloaded"},
		{name: "anthropic internal error", failure: p("anthropic", 500, `{"type":"error","error":{"type":"api_error","message":"An unexpected error has occurred internal to Anthropic's systems"}}`),
			wantType: typeServerError, wantRetryable: true, wantRule: "server_error"},
		{name: "anthropic invalid key", failure: p("anthropic", 401, `{"type":"error","error":{"type":"authentication_error","message":"Invalid API Key"}}`),
			wantType: typeAuth, wantRetryable: false, wantRule: "auth.invalid"},
		{name: "anthropic permission", failure: p("anthropic", 403, `{"type":"error","error":{"type":"permission_error","message":"Your API key does not have permission to use the specified resource"}}`),
			wantType: typePermission, wantRetryable: false, wantRule: "permission.denied"},
		{name: "anthropic prompt too long", failure: p("anthropic", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 234567 tokens > 200000 maximum"}}`),
			wantType: typeContextTooLong, wantRetryable: false, wantRule: "context_too_long"},
		{name: "anthropic credit balance", failure: p("anthropic", 400, `{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API."}}`),
			wantType: typeQuota, wantRetryable: false, wantRule: "quota.exhausted"},

		// Google (Vertex AI / Gemini)
		{name: "google per-minute 429", failure: p("vertex", 429, `{"error":{"code":429,"message":"Quota exceeded for aiplatform.googleapis.com/generate_content_requests_per_minute","status":"RESOURCE_EXHAUSTED"}}`),
			wantType: typeRateLimit, wantRetryable: true, wantRule: "rate_limit.per_minute"},
		{name: "google 503", failure: p("google", 503, `{"error":{"code":503,"message":"The model is temporarily unavailable. Please try again later.","status":"UNAVAILABLE"}}`),
			wantType: typeOverloaded, wantRetryable: true, wantRule: "overloaded"},
		{name: "google 401", failure: p("google", 401, `{"error":{"code":401,"message":"Request had invalid authentication credentials","status":"UNAUTHENTICATED"}}`),
			wantType: typeAuth, wantRetryable: false, wantRule: "auth.invalid"},
		{name: "google daily quota 429", failure: p("vertex", 429, `{"error":{"code":429,"message":"Quota exceeded for aiplatform.googleapis.com/base_model_generate_content_requests_per_day","status":"RESOURCE_EXHAUSTED"}}`),
			wantType: typeQuota, wantRetryable: false, wantRule: "quota.daily"},
		{name: "google blocked content", failure: p("google", 400, `{"error":{"code":400,"message":"User input or prompt contains blocked content","status":"INVALID_ARGUMENT"}}`),
			wantType: typeContentPolicy, wantRetryable: false, wantRule: "content_policy"},
		{name: "google QuotaFailure PerDay id", failure: p("google", 429, googleQuotaBody("GenerateRequestsPerDayPerProjectPerModel-FreeTier", "You exceeded your current quota.", "")),
			wantType: typeQuota, wantRetryable: false, wantRule: "quota.daily"},
		{name: "google limit 0", failure: p("google", 429, googleQuotaBody("GenerateContentInputTokensPerModelPerMinute-FreeTier", "Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_input_token_count, limit: 0, model: gemini-2.5-pro", "")),
			wantType: typeQuota, wantRetryable: false, wantRule: "quota.daily"},
		{name: "google per-minute with RetryInfo", failure: p("google", 429, googleQuotaBody("GenerateRequestsPerMinutePerProjectPerModel", "Resource has been exhausted. Please retry in 20.5s.", "20s")),
			wantType: typeRateLimit, wantRetryable: true, wantRule: "rate_limit.per_minute_quota"},
		{name: "google streaming array body", failure: p("google", 429, `[{"error":{"code":429,"message":"Quota exceeded for quota metric 'Generate Content API requests per minute'","status":"RESOURCE_EXHAUSTED"}}]`),
			wantType: typeRateLimit, wantRetryable: true, wantRule: "rate_limit.per_minute"},

		// Azure OpenAI (text bodies)
		{name: "azure rate limit", failure: p("azure", 429, "Requests to the ChatCompletions_Create Operation have exceeded rate limit. Try again in 59 seconds."),
			wantType: typeRateLimit, wantRetryable: true, wantRule: "rate_limit"},
		{name: "azure 503", failure: p("azure", 503, "The service is temporarily unable to process your request. Please try again later."),
			wantType: typeOverloaded, wantRetryable: true, wantRule: "overloaded"},
		{name: "azure invalid subscription", failure: p("azure", 401, "Access denied due to invalid subscription key or wrong API endpoint."),
			wantType: typeAuth, wantRetryable: false, wantRule: "auth.invalid"},
		{name: "azure deployment not found", failure: p("azure", 404, "The API deployment for this resource does not exist."),
			wantType: typeNotFound, wantRetryable: false, wantRule: "not_found"},
		{name: "azure content filter", failure: p("azure", 400, "The response was filtered due to the prompt triggering Azure OpenAI's content management policy."),
			wantType: typeContentPolicy, wantRetryable: false, wantRule: "content_policy"},
		{name: "azure content filter json", failure: p("azure", 400, `{"error":{"code":"content_filter","message":"The response was filtered","status":400}}`),
			wantType: typeContentPolicy, wantRetryable: false, wantRule: "content_policy"},

		// OpenRouter
		{name: "openrouter rate limit", failure: p("openrouter", 429, `{"error":{"code":"rate_limit","message":"Rate limit exceeded. Please slow down your requests."}}`),
			wantType: typeRateLimit, wantRetryable: true, wantRule: "rate_limit"},
		{name: "openrouter provider error", failure: p("openrouter", 502, `{"error":{"code":"provider_returned_error","message":"The upstream provider returned an error. OpenRouter may automatically retry with a different provider."}}`),
			wantType: typeServerError, wantRetryable: true, wantRule: "server_error"},
		{name: "openrouter credits", failure: p("openrouter", 402, `{"error":{"code":"insufficient_credits","message":"Insufficient credits. Please add credits at openrouter.ai/account."}}`),
			wantType: typeQuota, wantRetryable: false, wantRule: "quota.exhausted"},
		{name: "openrouter model not found", failure: p("openrouter", 404, `{"error":{"code":"model_not_found","message":"Model 'nonexistent/model' not found"}}`),
			wantType: typeNotFound, wantRetryable: false, wantRule: "not_found"},

		// The quick-reference table's statuses with no body.
		{name: "413 context too long", failure: p("openai", 413, ""), wantType: typeContextTooLong, wantRetryable: false, wantRule: "request_too_large"},
		{name: "501 unsupported", failure: p("openai", 501, ""), wantType: typeUnsupported, wantRetryable: false, wantRule: "unsupported"},
		{name: "504 timeout", failure: p("openai", 504, ""), wantType: typeTimeout, wantRetryable: true, wantRule: "timeout"},
		{name: "402 quota", failure: p("openai", 402, ""), wantType: typeQuota, wantRetryable: false, wantRule: "quota.exhausted"},
	})
}

// Seed 004's 429 decision logic: rate limit keywords retry, quota keywords do
// not, and a bare 429 is a rate limit.
func TestSeed004Distinguishing429(t *testing.T) {
	t.Parallel()
	m := func(msg string) *policydv1.Failure { return &policydv1.Failure{HttpStatus: 429, Message: msg} }
	runClassifyCases(t, []classifyCase{
		{name: "per_minute", failure: m("limit per_minute reached"), wantType: typeRateLimit, wantRetryable: true, wantRule: "rate_limit.per_minute"},
		{name: "per_second", failure: m("too many requests per_second"), wantType: typeRateLimit, wantRetryable: true, wantRule: "rate_limit.per_minute"},
		{name: "exceeded your current quota", failure: m("You exceeded your current quota"), wantType: typeQuota, wantRetryable: false, wantRule: "quota.exhausted.message"},
		{name: "insufficient", failure: m("insufficient funds on account"), wantType: typeQuota, wantRetryable: false, wantRule: "quota.exhausted.message"},
		{name: "billing", failure: m("check your billing details"), wantType: typeQuota, wantRetryable: false, wantRule: "quota.exhausted.message"},
		{name: "per day", failure: m("requests per day exceeded"), wantType: typeQuota, wantRetryable: false, wantRule: "quota.daily"},
		{name: "too many requests", failure: m("Too Many Requests"), wantType: typeRateLimit, wantRetryable: true, wantRule: "rate_limit"},
		{name: "bare", failure: m(""), wantType: typeRateLimit, wantRetryable: true, wantRule: "rate_limit"},
	})
}

// AWS Bedrock's exception names, as error_name, as a body __type and as the
// x-amzn-ErrorType header.
func TestSeed004BedrockExceptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		want      policydv1.FailureType
		retryable bool
		status    int32
		rule      string
	}{
		{"ThrottlingException", typeRateLimit, true, 429, "rate_limit"},
		{"ServiceUnavailableException", typeOverloaded, true, 503, "overloaded"},
		{"ModelNotReadyException", typeOverloaded, true, 429, "overloaded"},
		{"InternalServerException", typeServerError, true, 500, "server_error"},
		{"ModelTimeoutException", typeTimeout, true, 408, "timeout"},
		{"ModelStreamErrorException", typeStreamCut, true, 424, "stream.interrupted"},
		{"ModelErrorException", typeServerError, true, 424, "server_error"},
		{"ValidationException", typeInvalidRequest, false, 400, "invalid_request"},
		{"AccessDeniedException", typePermission, false, 403, "permission.denied"},
		{"ResourceNotFoundException", typeNotFound, false, 404, "not_found"},
		{"ServiceQuotaExceededException", typeQuota, false, 400, "quota.exhausted"},
		{"UnrecognizedClientException", typeAuth, false, 403, "auth.invalid"},
	}
	var cases []classifyCase
	for _, tc := range tests {
		cases = append(cases,
			classifyCase{name: tc.name + " as error_name", failure: &policydv1.Failure{Provider: "bedrock", ErrorName: tc.name},
				wantType: tc.want, wantRetryable: tc.retryable, wantRule: tc.rule},
			classifyCase{name: tc.name + " as body __type", failure: &policydv1.Failure{Provider: "bedrock", HttpStatus: 0,
				Body: `{"__type":"com.amazonaws.bedrock#` + tc.name + `","message":"failed"}`},
				wantType: tc.want, wantRetryable: tc.retryable, wantRule: tc.rule},
			classifyCase{name: tc.name + " as header", failure: &policydv1.Failure{Provider: "bedrock",
				Headers: map[string]string{"X-Amzn-ErrorType": tc.name + ":http://internal.amazon.com/coral/com.amazon.bedrock/"}},
				wantType: tc.want, wantRetryable: tc.retryable, wantRule: tc.rule},
		)
	}
	cases = append(cases, classifyCase{name: "bedrock input too long", failure: &policydv1.Failure{Provider: "bedrock", HttpStatus: 400, ErrorName: "ValidationException",
		Message: "Input is too long for requested model."}, wantType: typeContextTooLong, wantRetryable: false, wantRule: "context_too_long"})
	runClassifyCases(t, cases)
}

// Server delay hints in provider bodies: Google RetryInfo and phrases.
func TestSeed004DelayHintsInBodies(t *testing.T) {
	t.Parallel()
	c := newTestClassifier(t)
	tests := []struct {
		name       string
		failure    *policydv1.Failure
		want       time.Duration
		wantSource string
	}{
		{name: "google RetryInfo", failure: &policydv1.Failure{HttpStatus: 429, Body: googleQuotaBody("PerMinute", "Resource exhausted.", "20s")}, want: 20 * time.Second, wantSource: "body field"},
		{name: "google RetryInfo fractional", failure: &policydv1.Failure{HttpStatus: 429, Body: googleQuotaBody("PerMinute", "Resource exhausted.", "1.5s")}, want: 1500 * time.Millisecond, wantSource: "body field"},
		{name: "please retry in 20s", failure: &policydv1.Failure{HttpStatus: 429, Message: "Please retry in 20s."}, want: 20 * time.Second, wantSource: "body phrase"},
		{name: "retry in 20.5s in body", failure: &policydv1.Failure{HttpStatus: 429, Body: `{"error":{"message":"Please retry in 20.5s."}}`}, want: 20500 * time.Millisecond, wantSource: "body phrase"},
		{name: "azure try again in 59 seconds", failure: &policydv1.Failure{HttpStatus: 429, Body: "exceeded rate limit. Try again in 59 seconds."}, want: 59 * time.Second, wantSource: "body phrase"},
		{name: "try again in 1m30s", failure: &policydv1.Failure{HttpStatus: 429, Message: "try again in 1m30s"}, want: 90 * time.Second, wantSource: "body phrase"},
		{name: "try again in 500ms", failure: &policydv1.Failure{HttpStatus: 429, Message: "Please try again in 500ms"}, want: 500 * time.Millisecond, wantSource: "body phrase"},
		{name: "retry_after_ms field", failure: &policydv1.Failure{HttpStatus: 429, Body: `{"error":{"message":"slow down","retry_after_ms":1200}}`}, want: 1200 * time.Millisecond, wantSource: "body field"},
		{name: "header beats body", failure: &policydv1.Failure{HttpStatus: 429, Headers: map[string]string{"retry-after": "3"}, Body: googleQuotaBody("PerMinute", "x", "20s")}, want: 3 * time.Second, wantSource: "header retry-after"},
		{name: "x-amz-retry-after", failure: &policydv1.Failure{HttpStatus: 429, Headers: map[string]string{"x-amz-retry-after": "2500"}}, want: 2500 * time.Millisecond, wantSource: "header x-amz-retry-after"},
		{name: "grpc pushback", failure: &policydv1.Failure{GrpcCode: 8, Headers: map[string]string{"grpc-retry-pushback-ms": "700"}}, want: 700 * time.Millisecond, wantSource: "header grpc-retry-pushback-ms"},
		{name: "openai reset headers, exhausted tokens", failure: &policydv1.Failure{HttpStatus: 429, Headers: map[string]string{
			"x-ratelimit-remaining-requests": "59", "x-ratelimit-reset-requests": "1s",
			"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "6m0s"}}, want: 6 * time.Minute, wantSource: "header x-ratelimit-reset"},
		{name: "reset headers, exhausted requests", failure: &policydv1.Failure{HttpStatus: 429, Headers: map[string]string{
			"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "20ms",
			"x-ratelimit-remaining-tokens": "100", "x-ratelimit-reset-tokens": "6m0s"}}, want: 20 * time.Millisecond, wantSource: "header x-ratelimit-reset"},
		{name: "reset epoch seconds", failure: &policydv1.Failure{HttpStatus: 429, Headers: map[string]string{"X-RateLimit-Reset": "1795348845"}}, want: 45 * time.Second, wantSource: "header x-ratelimit-reset"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := c.Classify(tc.failure, nil, "")
			if got.GetRetryAfter() == nil {
				t.Fatalf("no retry_after; want %v from %q", tc.want, tc.wantSource)
			}
			if d := got.GetRetryAfter().AsDuration(); d != tc.want || got.GetRetryAfterSource() != tc.wantSource {
				t.Errorf("retry_after = %v from %q, want %v from %q", d, got.GetRetryAfterSource(), tc.want, tc.wantSource)
			}
		})
	}
}

// googleQuotaBody is a Gemini 429 with QuotaFailure, and RetryInfo when
// retryDelay is set: about 1 KiB, the typical provider body of the benchmark.
func googleQuotaBody(quotaID, message, retryDelay string) string {
	retry := ""
	if retryDelay != "" {
		retry = `,
      {
        "@type": "type.googleapis.com/google.rpc.RetryInfo",
        "retryDelay": "` + retryDelay + `"
      }`
	}
	return `{
  "error": {
    "code": 429,
    "message": "` + message + `",
    "status": "RESOURCE_EXHAUSTED",
    "details": [
      {
        "@type": "type.googleapis.com/google.rpc.QuotaFailure",
        "violations": [
          {
            "quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
            "quotaId": "` + quotaID + `",
            "quotaDimensions": {
              "location": "global",
              "model": "gemini-2.5-pro"
            },
            "quotaValue": "50"
          }
        ]
      },
      {
        "@type": "type.googleapis.com/google.rpc.Help",
        "links": [
          {
            "description": "Learn more about Gemini API quotas",
            "url": "https://ai.google.dev/gemini-api/docs/rate-limits"
          }
        ]
      }` + retry + `
    ]
  }
}`
}
