package policyd

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// DefaultPort is the port of an address that names none: policyd's own
// (`make run` serves on 7433), not HTTP's 80 or 443.
const DefaultPort = 7433

// address is a parsed daemon address (docs/clients.md, "The daemon
// address"): the gRPC target host:port, and whether its scheme asked for TLS.
type address struct {
	target string
	tls    bool
}

// parseAddress reads the one address grammar every client accepts:
// [http:// | https://] host [:port] [/], where host is a name, an IPv4
// address or a bracketed IPv6 address, and port defaults to DefaultPort.
// http:// is plaintext (as no scheme is) and https:// turns TLS on. Any
// other scheme, a path, an empty host or a port outside 1..65535 is an
// error naming what is wrong, so that a typo fails at Dial rather than
// looking like an outage.
func parseAddress(s string) (address, error) {
	var a address
	rest := strings.TrimSpace(s)
	if scheme, after, ok := strings.Cut(rest, "://"); ok {
		switch strings.ToLower(scheme) {
		case "http":
		case "https":
			a.tls = true
		default:
			return a, fmt.Errorf("address %q: scheme %q: want http:// or https:// (or none)", s, scheme)
		}
		rest = after
	}
	rest = strings.TrimSuffix(rest, "/")
	if strings.ContainsAny(rest, "/?# \t") {
		return a, fmt.Errorf("address %q: want [http://|https://]host[:port], without a path", s)
	}
	host, port := rest, ""
	switch {
	case strings.HasPrefix(rest, "["):
		end := strings.Index(rest, "]")
		if end < 0 {
			return a, fmt.Errorf("address %q: unclosed [ in an IPv6 address", s)
		}
		host = rest[1:end]
		tail := rest[end+1:]
		if tail != "" {
			if !strings.HasPrefix(tail, ":") {
				return a, fmt.Errorf("address %q: want [IPv6]:port", s)
			}
			port = tail[1:]
			if port == "" {
				return a, fmt.Errorf("address %q: empty port", s)
			}
		}
		if net.ParseIP(host) == nil {
			return a, fmt.Errorf("address %q: %q is not an IPv6 address", s, host)
		}
	case strings.Count(rest, ":") > 1:
		return a, fmt.Errorf("address %q: too many colons (write an IPv6 address in brackets: [::1]:%d)", s, DefaultPort)
	case strings.Contains(rest, ":"):
		host, port, _ = strings.Cut(rest, ":")
		if port == "" {
			return a, fmt.Errorf("address %q: empty port", s)
		}
	}
	if host == "" {
		return a, fmt.Errorf("address %q: no host", s)
	}
	n := DefaultPort
	if port != "" {
		var err error
		if n, err = strconv.Atoi(port); err != nil || n < 1 || n > 65535 || strings.HasPrefix(port, "+") {
			return a, fmt.Errorf("address %q: port %q: want a number in 1..65535", s, port)
		}
	}
	a.target = net.JoinHostPort(host, strconv.Itoa(n))
	return a, nil
}
