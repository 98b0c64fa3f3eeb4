package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "policyd:", err)
	}
	os.Exit(exitCode(err))
}

const usage = `policyd makes the retry judgement for AI agents: what a failure is, whether
another attempt can succeed, and what to do now — retry after a delay, stop
or fall back.

Usage:
  policyd <command> [flags]

Commands:
  serve          run the gRPC daemon
  classify       classify one failure offline and print the result as JSON
  next-delay     decide what to do after a failed attempt, offline, as JSON
  check-policy   check a policy file
  check-rules    replay labelled failure cases against the rules in force
  migrate        apply the journal's schema migrations
  prune          delete finished journal contexts older than an age
  fleet          show and clear a running daemon's fleet memory (list, get, clear)
  incidents      list a running daemon's incidents, or show one with its timeline
  version        print the version
  help           print this help, or a command's: policyd help <command>

Run 'policyd <command> --help' for a command's flags.
`

// run runs the command line args (without the program name). It returns
// flag.ErrHelp after printing requested help, and a *usageError for bad input.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return usageErrorf("no command given")
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve":
		return serve(ctx, rest, stdout, stderr)
	case "classify":
		return classify(rest, stdin, stdout)
	case "next-delay":
		return nextDelay(rest, stdin, stdout)
	case "check-policy":
		return checkPolicy(rest, stdout)
	case "check-rules":
		return checkRules(rest, stdout)
	case "migrate":
		return migrateCmd(ctx, rest, stdout)
	case "prune":
		return pruneCmd(ctx, rest, stdout)
	case "fleet":
		return fleetCmd(ctx, rest, stdout)
	case "incidents":
		return incidentsCmd(ctx, rest, time.Now(), stdout)
	case "version":
		return printVersion(rest, stdout)
	case "help":
		if len(rest) > 0 && rest[0] != "help" {
			return run(ctx, []string{rest[0], "--help"}, stdin, stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return nil
	case "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		return unknownCommand(cmd)
	}
}
