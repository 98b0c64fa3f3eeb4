package main

import (
	"strings"
)

// commands are the names run dispatches, for suggestions.
var commands = []string{"serve", "classify", "next-delay", "check-policy", "check-rules", "migrate", "prune", "version", "help"}

// unknownCommand is the usage error for a command run does not know: the
// error itself, the command it was probably meant to be, and where the
// list is; not the whole usage, which would push the error out of sight.
func unknownCommand(cmd string) error {
	if s := suggestCommand(cmd); s != "" {
		return usageErrorf("unknown command %q; did you mean %s? ('policyd help' lists the commands)", cmd, s)
	}
	return usageErrorf("unknown command %q; 'policyd help' lists the commands", cmd)
}

// suggestCommand returns the command closest to cmd when it is a likely
// typo (at most two edits away, or one for a name of up to four letters),
// else "".
func suggestCommand(cmd string) string {
	cmd = strings.ToLower(cmd)
	best, bestDist := "", -1
	for _, c := range commands {
		if d := editDistance(cmd, c); bestDist < 0 || d < bestDist {
			best, bestDist = c, d
		}
	}
	limit := 2
	if len(cmd) <= 4 {
		limit = 1
	}
	if bestDist > limit {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes
// (command names are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
