package main

import (
	"fmt"
	"io"
	"runtime"
)

// version is policyd's version, "dev" unless set at build time with
// -ldflags "-X main.version=v1.2.3".
var version = "dev"

const versionUsage = `Usage: policyd version

Prints policyd's version and the Go version it was built with.
`

func printVersion(args []string, stdout io.Writer) error {
	fs := newFlagSet("version", versionUsage)
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	_, err := fmt.Fprintf(stdout, "policyd %s %s %s/%s\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return err
}
