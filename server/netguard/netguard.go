// Package netguard decides which network addresses outbound requests to
// URLs that strangers supplied may reach. Herald POSTs to Web Push endpoints
// that anonymous clients register; without a guard any client could make it
// call loopback services, the cloud metadata address or the private network
// (server-side request forgery).
//
// The guard has three layers:
//   - CheckAddr classifies one IP address: only public unicast addresses
//     pass;
//   - Control is a net.Dialer hook that applies CheckAddr to the address
//     actually dialled, after DNS resolution, so a name that resolves (or
//     is rebound) to an internal address cannot pass;
//   - a Policy holds the hosts the operator allows anyway (a private push
//     service, test fakes): their URLs may use plain http and their dials
//     reach whatever the name resolves to. Policy.CheckURL judges a URL
//     without resolving it (registration time), Policy.Transport and
//     Policy.Client send requests through the guarded dialer and follow no
//     redirects.
//
// Every refusal is a *RefusedError, which errors.Is matches to ErrRefused, so
// callers tell "refused by policy" from network failures.
//
// The package imports nothing of Herald's.
package netguard

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrRefused is matched (errors.Is) by every refusal of this package.
var ErrRefused = errors.New("refused by the outbound network policy")

// RefusedError is a refusal: what was refused and why.
type RefusedError struct {
	Target string // the address, host or URL refused
	Reason string // e.g. "loopback address"
}

func (e *RefusedError) Error() string {
	return "netguard: " + e.Target + " refused: " + e.Reason
}

// Is makes errors.Is(err, ErrRefused) true.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

func refused(target, reason string) error { return &RefusedError{Target: target, Reason: reason} }

// refusedRange is a range of addresses that are not public unicast beyond
// what net/netip's predicates say.
type refusedRange struct {
	prefix netip.Prefix
	reason string
}

var refusedRanges = []refusedRange{
	{netip.MustParsePrefix("0.0.0.0/8"), `"this network" address`},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared address space (carrier-grade NAT)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignment"},
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking address"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation address"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation address"},
	{netip.MustParsePrefix("255.255.255.255/32"), "broadcast address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved address"},
	// IPv4-compatible IPv6 (deprecated; :: and ::1 are judged before).
	{netip.MustParsePrefix("::/96"), "IPv4-compatible IPv6 address"},
	// IPv4-translated (RFC 2765's ::ffff:0:a.b.c.d, not routed on the
	// Internet; a stack that honours it reaches the IPv4 address). The
	// IPv4-mapped ::ffff:a.b.c.d is its IPv4 address (Unmap, above).
	{netip.MustParsePrefix("::ffff:0:0:0/96"), "IPv4-translated IPv6 address"},
	{netip.MustParsePrefix("100::/64"), "discard-only address"},
	{netip.MustParsePrefix("2001::/32"), "Teredo address"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation address"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local-use NAT64 address"},
	{netip.MustParsePrefix("fec0::/10"), "site-local address"},
}

// Prefixes whose addresses embed an IPv4 address that a gateway would reach:
// they are judged by that address.
var (
	nat64  = netip.MustParsePrefix("64:ff9b::/96") // RFC 6052: the last 32 bits
	sixTo4 = netip.MustParsePrefix("2002::/16")    // RFC 3056: bits 16 to 48
)

// CheckAddr returns a *RefusedError unless ip is a public unicast address:
// it refuses the unspecified, loopback, private (RFC 1918, fc00::/7),
// link-local (169.254.0.0/16, fe80::/10), multicast, broadcast, carrier-grade
// NAT (100.64.0.0/10), "this network" (0.0.0.0/8), reserved, documentation
// and benchmarking addresses, IPv4-compatible and IPv4-translated IPv6
// addresses, and IPv6 forms that embed one of those (IPv4-mapped, NAT64,
// 6to4).
func CheckAddr(ip netip.Addr) error {
	if reason := refusal(ip); reason != "" {
		return refused(ip.String(), reason)
	}
	return nil
}

// refusal is why ip is refused, or "".
func refusal(ip netip.Addr) string {
	if !ip.IsValid() {
		return "not an IP address"
	}
	ip = ip.WithZone("").Unmap() // an IPv4-mapped address is its IPv4 address
	switch {
	case ip.IsUnspecified():
		return "unspecified address"
	case ip.IsLoopback():
		return "loopback address"
	case ip.IsPrivate():
		if ip.Is6() {
			return "unique local address"
		}
		return "private address"
	case ip.IsLinkLocalUnicast():
		return "link-local address"
	case ip.IsMulticast():
		return "multicast address"
	}
	for _, r := range refusedRanges {
		if r.prefix.Contains(ip) {
			return r.reason
		}
	}
	b := ip.As16()
	switch {
	case nat64.Contains(ip):
		if r := refusal(netip.AddrFrom4([4]byte(b[12:16]))); r != "" {
			return "NAT64 address of a " + r
		}
	case sixTo4.Contains(ip):
		if r := refusal(netip.AddrFrom4([4]byte(b[2:6]))); r != "" {
			return "6to4 address of a " + r
		}
	}
	return ""
}

// Control is a net.Dialer Control hook that refuses to connect to an
// address CheckAddr refuses, and to anything but TCP. It runs after DNS
// resolution, for each address the dialer tries, so it judges the address
// actually connected to: a host name resolving (or rebound) to an internal
// address is refused as that address.
func Control(network, address string, _ syscall.RawConn) error {
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return refused(address, "network "+network+" is not TCP")
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return refused(address, "not an IP address and port")
	}
	if reason := refusal(ap.Addr()); reason != "" {
		return refused(address, reason)
	}
	return nil
}

// Policy is the outbound policy for one kind of stranger-supplied URL: the
// hosts the operator allows to be private or plain http, and the guard for
// everything else. The nil *Policy allows no host: every request is
// guarded.
type Policy struct {
	allowed []allowedHost
}

// allowedHost is one allow-list entry.
type allowedHost struct {
	name string     // a lower-case host name without a trailing dot, or ""
	addr netip.Addr // or an IP address
	port int        // 0: any port
}

// NewPolicy returns a policy allowing hosts: host names or IP addresses,
// each optionally with ":port" (IPv6 addresses in brackets then, as in
// "[fd00::1]:8443"); without a port any port is allowed. Names match
// case-insensitively and exactly (no wildcards). An entry that cannot be a
// host matches nothing; the configuration checks entries before they get
// here.
func NewPolicy(hosts []string) *Policy {
	p := &Policy{}
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		var e allowedHost
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			host = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
		} else if e.port, err = strconv.Atoi(port); err != nil || e.port < 1 || e.port > 65535 {
			continue
		}
		if a, err := netip.ParseAddr(host); err == nil {
			e.addr = a.Unmap()
		} else if host = normalName(host); host != "" {
			e.name = host
		} else {
			continue
		}
		p.allowed = append(p.allowed, e)
	}
	return p
}

// normalName lower-cases a host name and drops a trailing dot.
func normalName(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }

// Allows reports whether the operator allowed host (a name or IP address as
// written in a URL, without brackets) on port (decimal; "" matches only
// entries without a port).
func (p *Policy) Allows(host, port string) bool {
	if p == nil || len(p.allowed) == 0 {
		return false
	}
	n := 0
	if port != "" {
		var err error
		if n, err = strconv.Atoi(port); err != nil {
			return false
		}
	}
	a, err := netip.ParseAddr(host)
	isAddr := err == nil
	name := normalName(host)
	for _, e := range p.allowed {
		if e.port != 0 && e.port != n {
			continue
		}
		if isAddr && e.addr.IsValid() && e.addr == a.Unmap() || !isAddr && e.name != "" && e.name == name {
			return true
		}
	}
	return false
}

// defaultPort is the port of a URL scheme.
func defaultPort(scheme string) string {
	if scheme == "http" {
		return "80"
	}
	return "443"
}

// CheckURL judges a URL before it is stored, without resolving its host:
// it must be https with a host, or plain http to an allowed host; a literal
// IP address must pass CheckAddr unless allowed; "localhost" names (RFC
// 6761: they are loopback) and numeric hosts that are no canonical IP
// address (resolvers read "2130706433" or "0x7f.1" as 127.0.0.1) are
// refused unless allowed. A host name is only judged by the address it
// resolves to when it is dialled. A URL that does not parse or is not
// http(s) is an error that is not a RefusedError.
func (p *Policy) CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("netguard: not a URL")
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return errors.New("netguard: not an http(s) URL")
	}
	host := u.Hostname()
	if host == "" {
		return errors.New("netguard: the URL has no host")
	}
	port := u.Port()
	if port == "" {
		port = defaultPort(u.Scheme)
	}
	if p.Allows(host, port) {
		return nil
	}
	if u.Scheme == "http" {
		return refused(u.Host, "plain http is allowed only to the operator's allowed hosts")
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if reason := refusal(a); reason != "" {
			return refused(u.Host, reason)
		}
		return nil
	}
	name := normalName(host)
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return refused(u.Host, "localhost names are loopback")
	}
	if numericHost(name) {
		return refused(u.Host, "a numeric host that is not a canonical IP address")
	}
	return nil
}

// numericHost reports whether the last label of a host name is a number
// (decimal or 0x hex): no top-level domain is, but resolvers read such
// names as IPv4 addresses in the old inet_aton forms.
func numericHost(name string) bool {
	last := name[strings.LastIndexByte(name, '.')+1:]
	if last == "" {
		return false
	}
	if h, ok := strings.CutPrefix(last, "0x"); ok {
		last = h
		return strings.Trim(last, "0123456789abcdef") == ""
	}
	return strings.Trim(last, "0123456789") == ""
}

// Dial timeouts of the guarded transport.
const (
	dialTimeout         = 10 * time.Second
	tlsHandshakeTimeout = 10 * time.Second
)

// DialContext dials addr ("host:port") for a request: an allowed host as
// is, anything else through a dialer whose Control hook refuses addresses
// CheckAddr refuses.
func (p *Policy) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	if host, port, err := net.SplitHostPort(addr); err != nil || !p.Allows(host, port) {
		d.Control = Control
	}
	return d.DialContext(ctx, network, addr)
}

// Transport takes over t (a new transport when nil) so that it dials
// through DialContext, and returns it wrapped in a RoundTripper that also
// refuses plain http to hosts that are not allowed and anything but
// http(s). t's other settings (TLS, pools, HTTP/2) stay; its dial hooks are
// replaced.
//
// Proxies from the environment (HTTP_PROXY, HTTPS_PROXY) are not used: through
// a proxy the connection goes to the proxy and the proxy resolves and
// connects to the endpoint, so the dial guard would judge the proxy's
// address and not the endpoint's, and a stranger's URL could reach whatever
// the proxy can.
func (p *Policy) Transport(t *http.Transport) *Guarded {
	if t == nil {
		t = &http.Transport{
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          100,
			IdleConnTimeout:       90 * time.Second,
			ExpectContinueTimeout: time.Second,
		}
	}
	t.Proxy = nil
	t.OnProxyConnectResponse = nil
	// Any other dial hook would bypass the guard (DialTLS and Dial are
	// deprecated, but a transport may still carry them).
	//lint:ignore SA1019 cleared, not used
	t.Dial, t.DialTLS, t.DialTLSContext = nil, nil, nil
	t.DialContext = p.DialContext
	if t.TLSHandshakeTimeout == 0 {
		t.TLSHandshakeTimeout = tlsHandshakeTimeout
	}
	return &Guarded{p: p, base: t}
}

// Guarded is the http.RoundTripper of Policy.Transport: it refuses requests
// the policy refuses by their URL alone and hands the others to a transport
// that dials through the policy.
type Guarded struct {
	p    *Policy
	base *http.Transport
}

// Base is the transport requests go through once their URL passed.
func (g *Guarded) Base() *http.Transport { return g.base }

// RoundTrip implements http.RoundTripper.
func (g *Guarded) RoundTrip(r *http.Request) (*http.Response, error) {
	if err := g.p.checkRequestURL(r.URL); err != nil {
		if r.Body != nil {
			r.Body.Close() // a RoundTripper must close the body, even on errors
		}
		return nil, err
	}
	return g.base.RoundTrip(r)
}

// checkRequestURL is the send-time URL check: the scheme and plain http.
// Addresses are judged when dialled.
func (p *Policy) checkRequestURL(u *url.URL) error {
	if u.Scheme != "https" && u.Scheme != "http" {
		return refused(u.Scheme+"://"+u.Host, "not an http(s) URL")
	}
	port := u.Port()
	if port == "" {
		port = defaultPort(u.Scheme)
	}
	if u.Scheme == "http" && !p.Allows(u.Hostname(), port) {
		return refused(u.Host, "plain http is allowed only to the operator's allowed hosts")
	}
	return nil
}

// NoRedirects is an http.Client CheckRedirect that follows no redirect: the
// request fails with a *RefusedError. A redirect would send the request to a
// URL nobody checked (its address is still dialled through the guard, but
// an allowed host could point anywhere), and a push service does not
// redirect.
func NoRedirects(req *http.Request, _ []*http.Request) error {
	return refused(req.URL.Host, "redirects are not followed")
}

// Client returns a client that sends through Transport(nil), follows no
// redirects and gives up on a request after timeout (0: none).
func (p *Policy) Client(timeout time.Duration) *http.Client {
	return &http.Client{Transport: p.Transport(nil), CheckRedirect: NoRedirects, Timeout: timeout}
}

// WebhookClient returns a client for the webhook URLs an operator configured
// (Channels and publish webhooks), which are not judged by a Policy unless
// the operator asks: with dial set (a Policy's DialContext) every connection
// is made by it, and proxies from the environment are not used, as in
// Transport. A redirect is not followed either way: it would turn the POST
// into a GET whose 2xx would count as delivered, and could lead past the
// guard's intent; the 3xx is the answer, a failure the caller retries.
// idlePerHost is how many idle connections are kept per host (0: net/http's
// default).
func WebhookClient(timeout time.Duration, dial func(ctx context.Context, network, addr string) (net.Conn, error), idlePerHost int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if dial != nil {
		tr.DialContext = dial
		tr.Proxy = nil
	}
	if idlePerHost > 0 {
		tr.MaxIdleConnsPerHost = idlePerHost
	}
	return &http.Client{
		Timeout:       timeout,
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
