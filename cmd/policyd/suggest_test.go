package main

import "testing"

func TestSuggestCommand(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, cmd, want string
	}{
		{name: "one letter dropped", cmd: "clasify", want: "classify"},
		{name: "two letters swapped", cmd: "sevre", want: "serve"},
		{name: "upper case", cmd: "Classify", want: "classify"},
		{name: "a dash dropped", cmd: "nextdelay", want: "next-delay"},
		{name: "nothing close", cmd: "bogus", want: ""},
		{name: "short and far", cmd: "xy", want: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := suggestCommand(tc.cmd); got != tc.want {
				t.Errorf("suggestCommand(%q) = %q, want %q", tc.cmd, got, tc.want)
			}
		})
	}
}
