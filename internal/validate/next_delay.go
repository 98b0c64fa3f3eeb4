package validate

import (
	"github.com/google/uuid"
	"strings"
	"time"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
	"github.com/policyd/policyd/internal/policy"
)

const (
	// MaxAttempt bounds NextDelayRequest.attempt; no strategy allows more.
	MaxAttempt = 1000
	// MaxElapsed bounds NextDelayRequest.elapsed.
	MaxElapsed = 30 * 24 * time.Hour
	// MaxLabelBytes bounds client_id and failure.key_id: labels, not data.
	MaxLabelBytes = 128
)

// NextDelayRequest checks req against policyd's request limits and
// the profiles of p, and returns the first violation as a *FieldError, or
// nil. The server and the offline `policyd next-delay` both apply it.
//
//   - exactly one of failure and failure_type is given; failure is checked
//     as ClassifyRequest checks it, failure_type is a known value;
//   - attempt is 1..1000 (the attempts made, the failed one included);
//   - profile is empty (meaning "default") or a profile of p; an unknown
//     profile is a bad argument, not a missing resource;
//   - elapsed is valid, non-negative and at most 30 days;
//   - deadline, when set, is a valid timestamp (a past one is allowed: the
//     decision is to stop);
//   - safety is a known value;
//   - context_id is empty or a UUID;
//   - client_id (and failure.key_id) are at most 128 bytes.
func NextDelayRequest(req *policydv1.NextDelayRequest, p *policy.Policy) error {
	f, ft := req.GetFailure(), req.GetFailureType()
	switch {
	case f == nil && ft == policydv1.FailureType_FAILURE_TYPE_UNSPECIFIED:
		return Fieldf("failure", "give failure or failure_type")
	case f != nil && ft != policydv1.FailureType_FAILURE_TYPE_UNSPECIFIED:
		return Fieldf("failure_type", "give failure or failure_type, not both")
	case f != nil:
		if err := Failure(f); err != nil {
			return err
		}
	case policydv1.FailureType_name[int32(ft)] == "":
		return Fieldf("failure_type", "unknown value %d", ft)
	}
	if a := req.GetAttempt(); a < 1 {
		return Fieldf("attempt", "must be at least 1 (the number of attempts made, the failed one included)")
	} else if a > MaxAttempt {
		return Fieldf("attempt", "must be at most %d, got %d", MaxAttempt, a)
	}
	if err := ProfileIn(p, req.GetProfile()); err != nil {
		return err
	}
	if e := req.GetElapsed(); e != nil {
		if err := e.CheckValid(); err != nil {
			return Fieldf("elapsed", "invalid duration: %v", err)
		}
		if d := e.AsDuration(); d < 0 {
			return Fieldf("elapsed", "must not be negative, got %v", d)
		} else if d > MaxElapsed {
			return Fieldf("elapsed", "must be at most 30 days, got %v", d)
		}
	}
	if dl := req.GetDeadline(); dl != nil {
		if err := dl.CheckValid(); err != nil {
			return Fieldf("deadline", "invalid timestamp: %v", err)
		}
		// Before 1970 is no deadline a client means, and year 1, the zero
		// time, would read as none at all.
		if dl.GetSeconds() < 0 {
			return Fieldf("deadline", "%v is before 1970", dl.AsTime().Format(time.RFC3339))
		}
	}
	if s := req.GetSafety(); policydv1.OperationSafety_name[int32(s)] == "" {
		return Fieldf("safety", "unknown value %d", s)
	}
	if err := ContextID(req.GetContextId(), false); err != nil {
		return err
	}
	if n := len(req.GetClientId()); n > MaxLabelBytes {
		return Fieldf("client_id", "%d bytes, at most %d allowed", n, MaxLabelBytes)
	}
	// options: both switches are booleans; any value is valid.
	return nil
}

// ProfileIn checks that name is empty (the default profile) or a
// profile of p; the error lists the known profiles.
func ProfileIn(p *policy.Policy, name string) error {
	if err := Name("profile", name); err != nil {
		return err
	}
	name = policy.ProfileName(name)
	if _, ok := p.Profiles[name]; !ok {
		return Fieldf("profile", "unknown profile %q; known: %s", name, strings.Join(p.ProfileNames(), ", "))
	}
	return nil
}

// Truncate shortens s to at most n bytes for an error message.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// ContextID checks a context id: a UUID in its canonical 36-character
// form, as the journal stores it (uuid.Parse also takes "{...}",
// "urn:uuid:..." and 32 bare hex digits, which the journal refuses: a
// NextDelay that accepted them would drop its journal write).
func ContextID(id string, required bool) error {
	if id == "" {
		if required {
			return Fieldf("context_id", "required")
		}
		return nil
	}
	if _, err := uuid.Parse(id); err != nil || len(id) != 36 {
		return Fieldf("context_id", "must be a UUID such as 123e4567-e89b-12d3-a456-426614174000, got %q", Truncate(id, 64))
	}
	return nil
}
