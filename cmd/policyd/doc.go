// Command policyd classifies AI agent failures: what a failure is, whether
// another attempt can succeed and what to do about it.
//
//	policyd serve      run the gRPC daemon (PolicyService, health, reflection)
//	policyd classify   classify one failure offline and print the result as JSON
//	policyd version    print the version
//
// Run `policyd <command> --help` for a command's flags. Bad input exits 2.
package main
