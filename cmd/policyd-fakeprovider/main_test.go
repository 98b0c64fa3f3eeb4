package main

import (
	"io"
	"strings"
	"testing"
)

func TestFlagErrorsNameTheFlag(t *testing.T) {
	for args, want := range map[string]string{
		"-tpm -5":            "flag -tpm: -5 is negative",
		"-chunk-delay -1s":   "flag -chunk-delay: -1s is negative",
		"-listen nohost:abc": "flag -listen:",
	} {
		err := run(strings.Fields(args), io.Discard)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
}
