package enums

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	policydv1 "github.com/policyd/policyd/gen/policyd/v1"
)

// roundTrip checks every value of E: Short and Parse invert each other, the
// full and lower-case names parse too, and the zero value is refused.
func roundTrip[E Enum](t *testing.T) {
	t.Helper()
	var zero E
	d := zero.Descriptor()
	values := d.Values()
	if values.Len() < 2 {
		t.Fatalf("%s has %d values", d.FullName(), values.Len())
	}
	for i := range values.Len() {
		v := values.Get(i)
		e := E(v.Number())
		short := Short(e)
		if !strings.HasPrefix(string(v.Name()), Prefix(d)) || Prefix(d)+short != string(v.Name()) {
			t.Errorf("%s: %s has no prefix %s (short %q)", d.FullName(), v.Name(), Prefix(d), short)
		}
		for _, name := range []string{short, string(v.Name()), strings.ToLower(short), " " + short + " "} {
			got, ok := Parse[E](name)
			if v.Number() == 0 {
				if ok {
					t.Errorf("%s: the zero value %q parsed", d.FullName(), name)
				}
				continue
			}
			if !ok || got != e {
				t.Errorf("%s: Parse(%q) = %v, %v; want %v", d.FullName(), name, got, ok, e)
			}
		}
	}
	if _, ok := Parse[E]("NO_SUCH_VALUE"); ok {
		t.Errorf("%s: an unknown name parsed", d.FullName())
	}
	if got := Short(E(1000)); got != "1000" {
		t.Errorf("%s: Short of an unknown number = %q", d.FullName(), got)
	}
	if n := len(Names[E]()); n != values.Len()-1 {
		t.Errorf("%s: Names has %d, want %d", d.FullName(), n, values.Len()-1)
	}
}

// Every enum of the API, listed from the files' descriptors, so that a new
// enum cannot be missed: each must be in this switch.
func TestEveryEnumRoundTrips(t *testing.T) {
	files := []protoreflect.FileDescriptor{
		policydv1.File_policyd_v1_policy_proto, policydv1.File_policyd_v1_journal_proto, policydv1.File_policyd_v1_fleet_proto,
	}
	for _, f := range files {
		for i := range f.Enums().Len() {
			d := f.Enums().Get(i)
			t.Run(string(d.Name()), func(t *testing.T) {
				switch d.Name() {
				case "FailureType":
					roundTrip[policydv1.FailureType](t)
				case "Phase":
					roundTrip[policydv1.Phase](t)
				case "OperationSafety":
					roundTrip[policydv1.OperationSafety](t)
				case "Action":
					roundTrip[policydv1.Action](t)
				case "StopReason":
					roundTrip[policydv1.StopReason](t)
				case "BreakerState":
					roundTrip[policydv1.BreakerState](t)
				case "FallbackKind":
					roundTrip[policydv1.FallbackKind](t)
				case "Backoff":
					roundTrip[policydv1.Backoff](t)
				case "Jitter":
					roundTrip[policydv1.Jitter](t)
				case "RetryAfterMode":
					roundTrip[policydv1.RetryAfterMode](t)
				case "RetryAfterAboveCeiling":
					roundTrip[policydv1.RetryAfterAboveCeiling](t)
				case "Outcome":
					roundTrip[policydv1.Outcome](t)
				default:
					t.Fatalf("enum %s is not in this test: add it", d.FullName())
				}
			})
		}
	}
}

func TestShortNames(t *testing.T) {
	if got := Short(policydv1.FailureType_FAILURE_TYPE_RATE_LIMIT); got != "RATE_LIMIT" {
		t.Errorf("Short = %q", got)
	}
	if got := Lower(policydv1.StopReason_STOP_REASON_CIRCUIT_OPEN); got != "circuit_open" {
		t.Errorf("Lower = %q", got)
	}
	if got := Prefix(policydv1.RetryAfterAboveCeiling(0).Descriptor()); got != "RETRY_AFTER_ABOVE_CEILING_" {
		t.Errorf("Prefix = %q", got)
	}
}

func BenchmarkShort(b *testing.B) {
	for b.Loop() {
		_ = Short(policydv1.FailureType_FAILURE_TYPE_RATE_LIMIT)
	}
}
