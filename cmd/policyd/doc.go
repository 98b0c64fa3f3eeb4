// Command policyd makes the retry judgement for AI agents: what a failure
// is, whether another attempt can succeed, and what to do now — retry after
// a delay, stop or fall back.
//
//	policyd serve          run the gRPC daemon (PolicyService, health, reflection)
//	policyd classify       classify one failure offline and print the result as JSON
//	policyd next-delay     decide what to do after a failed attempt, offline, as JSON
//	policyd check-policy   check a policy file
//	policyd version        print the version
//
// Run `policyd <command> --help` for a command's flags. Bad input exits 2;
// check-policy exits 1 for a bad policy file.
package main
