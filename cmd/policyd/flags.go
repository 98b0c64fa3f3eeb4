package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// usageError is bad input: a flag, an argument or a request. policyd prints
// it and exits 2, the usual exit code for usage errors.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErrorf(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// exitCode is the process exit code for run's error: 0 for none or for
// requested help, 2 for a usage error, 1 otherwise.
func exitCode(err error) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if _, ok := errors.AsType[*usageError](err); ok {
		return 2
	}
	return 1
}

// newFlagSet returns a FlagSet for a subcommand whose help is synopsis
// followed by the flags.
func newFlagSet(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), synopsis)
		printFlags(fs.Output(), fs)
	}
	return fs
}

// parseFlags parses args into fs. On --help it prints the help to stdout and
// returns flag.ErrHelp; a bad flag or a positional argument is a usageError
// naming the flag as --name.
func parseFlags(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	if err := parseFlagsArgs(fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("%s: unexpected argument %q; see 'policyd %[1]s --help'", fs.Name(), fs.Arg(0))
	}
	return nil
}

// parseFlagsArgs is parseFlags for a command that takes positional
// arguments (fs.Args()), which it leaves to the caller to check.
func parseFlagsArgs(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	fs.SetOutput(io.Discard) // errors are returned, not printed with the help
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(stdout)
		fs.Usage()
		return err
	}
	if err != nil {
		return usageErrorf("%s: %s; see 'policyd %[1]s --help'", fs.Name(), dashdash(err.Error()))
	}
	return nil
}

// dashdash rewrites the flag package's "-name" in a parse error to "--name",
// the spelling policyd documents.
func dashdash(msg string) string {
	for _, p := range []string{"for flag -", "not defined: -", "needs an argument: -"} {
		if i := strings.Index(msg, p); i >= 0 {
			return msg[:i+len(p)] + "-" + msg[i+len(p):]
		}
	}
	return msg
}

// printFlags is flag.PrintDefaults with "--name" spelling.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	header := "\nFlags:\n"
	fs.VisitAll(func(f *flag.Flag) {
		fmt.Fprint(w, header)
		header = ""
		arg, help := flag.UnquoteUsage(f)
		fmt.Fprintf(w, "  --%s", f.Name)
		if arg != "" {
			fmt.Fprintf(w, " %s", arg)
		}
		fmt.Fprintf(w, "\n    \t%s", help)
		if f.DefValue != "" && f.DefValue != "false" {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
}

// int32Var defines an int32 flag; out-of-range values are parse errors.
func int32Var(fs *flag.FlagSet, p *int32, name, usage string) {
	fs.Func(name, usage, func(s string) error {
		v, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			return errors.New("want a 32-bit integer")
		}
		*p = int32(v)
		return nil
	})
}
