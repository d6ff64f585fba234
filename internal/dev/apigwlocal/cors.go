package apigwlocal

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/onejob/onejob/internal/apigw"
)

// EnvCORSOrigins lists the origins browsers may call the local server from,
// comma-separated: exact origins (http://localhost:5173), a port wildcard
// (http://localhost:*) or "*".
const EnvCORSOrigins = "ONEJOB_CORS_ORIGINS"

// DefaultCORSOrigins are allowed when ONEJOB_CORS_ORIGINS is unset: pages
// served from this machine, on any port.
func DefaultCORSOrigins() []string {
	return []string{
		"http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*",
		"https://localhost:*", "https://127.0.0.1:*", "https://[::1]:*",
	}
}

// CORS answers browsers as API Gateway does once an HTTP API has a CORS
// configuration: preflights (OPTIONS with Origin and
// Access-Control-Request-Method) are answered before the authorizer, and
// every other response names an allowed origin. An origin that is not
// allowed gets no CORS headers at all, so the browser refuses the call.
type CORS struct {
	any      bool
	patterns []originPattern
}

type originPattern struct {
	scheme, host string
	port         string // "*" for any
}

// NewCORS parses the allowed origins.
func NewCORS(origins []string) (*CORS, error) {
	c := &CORS{}
	for _, o := range origins {
		o = strings.TrimSpace(o)
		if o == "*" {
			c.any = true
			continue
		}
		p, err := parseOrigin(o, true)
		if err != nil {
			return nil, fmt.Errorf("apigwlocal: CORS origin %q: %w", o, err)
		}
		c.patterns = append(c.patterns, p)
	}
	return c, nil
}

// parseOrigin reads scheme://host[:port] (port "*" when wildcard is true),
// with default ports made explicit.
func parseOrigin(s string, wildcard bool) (originPattern, error) {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok || (scheme != "http" && scheme != "https") || rest == "" || strings.ContainsAny(rest, "/?#@") {
		return originPattern{}, fmt.Errorf("want scheme://host[:port] with scheme http or https")
	}
	p := originPattern{scheme: scheme}
	if wildcard && strings.HasSuffix(rest, ":*") {
		p.host, p.port = strings.TrimSuffix(rest, ":*"), "*"
	} else {
		u, err := url.Parse(s)
		if err != nil || u.Hostname() == "" {
			return originPattern{}, fmt.Errorf("not an origin")
		}
		p.port = u.Port()
		p.host = strings.TrimSuffix(rest, ":"+p.port)
		if p.port == "" {
			p.port = map[string]string{"http": "80", "https": "443"}[scheme]
		} else if n, err := strconv.Atoi(p.port); err != nil || n < 1 || n > 65535 {
			return originPattern{}, fmt.Errorf("bad port")
		}
	}
	if p.host == "" || strings.Contains(p.host, "*") {
		return originPattern{}, fmt.Errorf("want a host name, no wildcard")
	}
	p.host = strings.ToLower(p.host)
	return p, nil
}

// allow returns the Access-Control-Allow-Origin value for an Origin header,
// or false when the origin may not call.
func (c *CORS) allow(origin string) (string, bool) {
	if origin == "" {
		return "", false
	}
	if c.any {
		return "*", true
	}
	o, err := parseOrigin(origin, false)
	if err != nil {
		return "", false
	}
	for _, p := range c.patterns {
		if p.scheme == o.scheme && p.host == o.host && (p.port == "*" || p.port == o.port) {
			return origin, true
		}
	}
	return "", false
}

// isPreflight tells a CORS preflight from any other OPTIONS request.
func isPreflight(r *http.Request) bool {
	return r.Method == http.MethodOptions && r.Header.Get("Origin") != "" && r.Header.Get("Access-Control-Request-Method") != ""
}

// preflight answers a preflight: 204, with the configuration's headers
// when the origin is allowed and none otherwise.
func (c *CORS) preflight(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Add("Vary", "Origin")
	if allow, ok := c.allow(r.Header.Get("Origin")); ok {
		h.Set("Access-Control-Allow-Origin", allow)
		h.Set("Access-Control-Allow-Methods", strings.Join(apigw.CORSAllowMethods(), ","))
		h.Set("Access-Control-Allow-Headers", strings.ToLower(strings.Join(apigw.CORSAllowHeaders(), ",")))
		h.Set("Access-Control-Max-Age", strconv.Itoa(int(apigw.CORSMaxAge.Seconds())))
	}
	w.WriteHeader(http.StatusNoContent)
}

// decorate adds the CORS headers of an actual (non-preflight) response.
func (c *CORS) decorate(h http.Header, r *http.Request) {
	h.Add("Vary", "Origin")
	if allow, ok := c.allow(r.Header.Get("Origin")); ok {
		h.Set("Access-Control-Allow-Origin", allow)
		h.Set("Access-Control-Expose-Headers", strings.ToLower(strings.Join(apigw.CORSExposeHeaders(), ",")))
	}
}
