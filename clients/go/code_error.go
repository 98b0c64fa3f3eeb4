package policyd

// CodeError gives an error a machine code policyd knows, for failures that
// are not network or HTTP errors: a task runner's "TEST_FAILURE",
// "LINT_FAILURE", "RATE_LIMIT", "HOOK_FAILURE" (seed 002), a stream's
// "NO_FINISH_REASON" or "NO_RESPONSE_TEXT" (seed 001). FailureFromError
// reports Code as the failure's error code.
type CodeError struct {
	// Code is the machine code, e.g. "TEST_FAILURE".
	Code string
	// Err is the underlying error; may be nil.
	Err error
}

// WithCode returns err with a machine code, or nil when err is nil.
func WithCode(err error, code string) error {
	if err == nil {
		return nil
	}
	return &CodeError{Code: code, Err: err}
}

// Error returns "CODE: message", or the code alone without Err.
func (e *CodeError) Error() string {
	if e.Err == nil {
		return e.Code
	}
	return e.Code + ": " + e.Err.Error()
}

// Unwrap returns Err.
func (e *CodeError) Unwrap() error { return e.Err }

// StreamError marks where in a streaming call an error happened, which
// some profiles treat differently (seed 000: a stream cut after it started
// is STREAM_INTERRUPTED; agent_cli leaves connect-phase failures to the
// request layer).
type StreamError struct {
	// Phase is PhaseConnect (before any data arrived) or PhaseMidStream.
	Phase Phase
	// Err is the underlying error.
	Err error
}

// MidStream marks err as a failure after the stream had started delivering
// data; nil stays nil.
func MidStream(err error) error {
	if err == nil {
		return nil
	}
	return &StreamError{Phase: PhaseMidStream, Err: err}
}

// Error returns Err's message.
func (e *StreamError) Error() string {
	if e.Err == nil {
		return "stream failed (" + e.Phase.String() + ")"
	}
	return e.Err.Error()
}

// Unwrap returns Err.
func (e *StreamError) Unwrap() error { return e.Err }
