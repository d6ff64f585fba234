package apigwlocal

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dev/testenv"
)

// Local server settings and their defaults.
const (
	EnvLocalAddr     = "ONEJOB_ADDR"
	DefaultLocalAddr = "127.0.0.1:8080"
	// localTimeout is API Gateway's integration timeout.
	localTimeout = 30 * time.Second
)

// LocalSettings is the local server's configuration from the environment.
type LocalSettings struct {
	Addr      string
	JWTSecret string
	// SecretGenerated: JWTSecret was made for this run (NewLocalSecret),
	// as ONEJOB_LOCAL_JWT_SECRET was not set.
	SecretGenerated bool
	// CORSOrigins may call the API from a browser (see NewCORS).
	CORSOrigins []string
	// Admin is which claim makes an operator, as deployed
	// (deploy.EnvAdminClaim, deploy.EnvAdminValue); zero is the default.
	Admin apigw.AdminRule
}

// LocalSettingsFromEnv reads ONEJOB_ADDR, ONEJOB_LOCAL_JWT_SECRET,
// ONEJOB_CORS_ORIGINS and the admin claim (ONEJOB_ADMIN_CLAIM,
// ONEJOB_ADMIN_VALUE), applying their defaults; without a secret it makes
// one for this run.
func LocalSettingsFromEnv(getenv func(string) string) LocalSettings {
	s := LocalSettings{Addr: getenv(EnvLocalAddr), JWTSecret: getenv(EnvLocalSecret)}
	if s.Addr == "" {
		s.Addr = DefaultLocalAddr
	}
	if s.JWTSecret == "" {
		s.JWTSecret, s.SecretGenerated = NewLocalSecret(), true
	}
	for _, o := range strings.Split(getenv(EnvCORSOrigins), ",") {
		if o = strings.TrimSpace(o); o != "" {
			s.CORSOrigins = append(s.CORSOrigins, o)
		}
	}
	if len(s.CORSOrigins) == 0 {
		s.CORSOrigins = DefaultCORSOrigins()
	}
	s.Admin = apigw.AdminRule{Claim: getenv(deploy.EnvAdminClaim), Value: getenv(deploy.EnvAdminValue)}
	if s.Admin == (apigw.AdminRule{}) {
		s.Admin = apigw.DefaultAdminRule()
	}
	return s
}

// ServerConfig wires a Server. Validate it with NewServer.
type ServerConfig struct {
	Handler *apigw.Handler
	// Functions serve the routes another function than the API's serves
	// (apigw.Route.Function), as infra/ integrates them; a route whose
	// function is absent here goes to Handler.
	Functions map[string]*apigw.Handler
	// Tokens verifies bearer tokens, as API Gateway's JWT authorizer does.
	Tokens *Tokens
	Clock  func() time.Time
	Logger *slog.Logger
	// CORSOrigins may call the API from a browser; empty means
	// DefaultCORSOrigins.
	CORSOrigins []string
	// Mounts are folders served as they are (local pages), before the
	// authorizer.
	Mounts []Mount
}

// Server serves the API over plain net/http the way API Gateway does: it
// answers CORS preflights, runs the JWT authorizer (a 401 problem before
// the handler is called), builds the payload 2.0 event API Gateway would
// send, calls the same Handler, and writes its response with the CORS
// headers API Gateway would add. Public routes (the console) skip the
// authorizer, as they have none in AWS. GET /openapi.yaml serves the document, and
// the mounts serve local pages.
//
// Requests matching none of the routes reach the handler under the
// "$default" route key (API Gateway would answer them itself), so that they
// too get problem documents.
type Server struct {
	h      *apigw.Handler
	tokens *Tokens
	now    func() time.Time
	log    *slog.Logger
	cors   *CORS
	files  *files
	// public are the keys of the routes served without a token.
	public map[string]bool
	// byRoute are the handlers of the routes another function serves.
	byRoute map[string]*apigw.Handler
}

// NewServer validates the configuration.
func NewServer(c ServerConfig) (*Server, error) {
	if c.Handler == nil || c.Tokens == nil {
		return nil, errors.New("apigwlocal: the server needs a handler and tokens")
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if len(c.CORSOrigins) == 0 {
		c.CORSOrigins = DefaultCORSOrigins()
	}
	cors, err := NewCORS(c.CORSOrigins)
	if err != nil {
		return nil, err
	}
	f, err := newFiles(c.Mounts)
	if err != nil {
		return nil, err
	}
	public, byRoute := map[string]bool{}, map[string]*apigw.Handler{}
	for _, rt := range apigw.Routes() {
		if rt.Public {
			public[rt.Key()] = true
		}
		if h := c.Functions[rt.Function]; rt.Function != "" && h != nil {
			byRoute[rt.Key()] = h
		}
	}
	return &Server{h: c.Handler, tokens: c.Tokens, now: c.Clock, log: c.Logger, cors: cors, files: f, public: public, byRoute: byRoute}, nil
}

// ServeHTTP answers one request as API Gateway and the Lambda would.
func (l *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The handler's answers carry it; the local pages, the document and
	// the fallback 500 too.
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if !LoopbackHost(r.Host) {
		// DNS rebinding: a page whose name now resolves to 127.0.0.1 is
		// same-origin with this server, so CORS cannot stop it, but its
		// requests name its own host.
		requestID := apigw.NewRequestID()
		l.log.InfoContext(r.Context(), "request_refused", "request_id", requestID, "method", r.Method, "reason", "host is not loopback")
		l.write(w, requestID, l.h.Problem(requestID, r.URL.EscapedPath(), &apigw.Error{Code: apigw.CodeForbidden,
			Detail: "the local server answers requests to 127.0.0.1, localhost or [::1] only"}))
		return
	}
	if isPreflight(r) {
		l.cors.preflight(w, r)
		return
	}
	l.cors.decorate(w.Header(), r)
	if l.files.serve(w, r) {
		return
	}
	if r.Method == http.MethodGet && r.URL.Path == "/openapi.yaml" {
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(apigw.OpenAPI())
		return
	}
	now := l.now()
	requestID := apigw.NewRequestID()
	// A public route has no authorizer: API Gateway passes its requests on
	// without claims, whatever Authorization they carry.
	var claims Claims
	if routeKey, _ := l.h.RouteFor(r.Method, r.URL.EscapedPath()); !l.public[routeKey] {
		var err error
		claims, err = l.tokens.Verify(r.Header.Get("Authorization"))
		if err != nil {
			resp := l.h.Problem(requestID, r.URL.EscapedPath(), err)
			l.log.InfoContext(r.Context(), "request", "request_id", requestID, "method", r.Method,
				"status", resp.StatusCode, "error", err.Error())
			l.write(w, requestID, resp)
			return
		}
	}
	// One byte past the limit is enough for the handler to answer 413; the
	// rest is never read.
	body, err := io.ReadAll(io.LimitReader(r.Body, apigw.MaxBodyBytes+1))
	if err != nil {
		l.log.WarnContext(r.Context(), "request_body_unreadable", "request_id", requestID, "error", err.Error())
		l.write(w, requestID, l.h.Problem(requestID, r.URL.EscapedPath(),
			&apigw.Error{Code: apigw.CodeMalformedJSON, Detail: "the body could not be read"}))
		return
	}
	ev := l.event(r, body, claims, requestID, now)
	// A Lambda is not cancelled when the client goes away; API Gateway
	// gives up after its integration timeout. So a write goes on to its end
	// whoever still listens; a read (a GET held by Prefer: wait above all)
	// has no one to answer, and stops instead of polling the store.
	ctx := r.Context()
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		ctx = context.WithoutCancel(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, localTimeout)
	defer cancel()
	h := l.h
	if fn, ok := l.byRoute[ev.RouteKey]; ok {
		h = fn
	}
	resp, err := h.Handle(ctx, ev)
	if err != nil {
		// What API Gateway answers when the function itself fails.
		resp = events.APIGatewayV2HTTPResponse{StatusCode: http.StatusInternalServerError,
			Headers: map[string]string{"Content-Type": "application/json"}, Body: `{"message":"Internal Server Error"}`}
	}
	l.write(w, requestID, resp)
}

// LoopbackHost reports whether a Host header names this machine:
// 127.0.0.1, localhost or [::1], with any port or none. A name that merely
// resolves to a loopback address (anything a DNS server answers for) is not
// one.
func LoopbackHost(host string) bool {
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		name = host[1 : len(host)-1]
	}
	switch strings.ToLower(name) {
	case "127.0.0.1", "localhost", "::1":
		return true
	}
	return false
}

// event builds the API Gateway HTTP API payload 2.0 event for r.
func (l *Server) event(r *http.Request, body []byte, claims Claims, requestID string, now time.Time) events.APIGatewayV2HTTPRequest {
	headers := map[string]string{}
	var cookies []string
	for name, values := range r.Header {
		lname := strings.ToLower(name)
		if lname == "cookie" {
			for _, v := range values {
				for _, c := range strings.Split(v, ";") {
					if c = strings.TrimSpace(c); c != "" {
						cookies = append(cookies, c)
					}
				}
			}
			continue
		}
		headers[lname] = strings.Join(values, ",")
	}
	sourceIP, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		sourceIP = r.RemoteAddr
	}
	headers["host"] = r.Host
	if r.ContentLength >= 0 && len(body) > 0 {
		headers["content-length"] = strconv.FormatInt(r.ContentLength, 10)
	}
	headers["x-forwarded-for"] = sourceIP
	headers["x-forwarded-proto"] = "http"
	if _, port, err := net.SplitHostPort(r.Host); err == nil {
		headers["x-forwarded-port"] = port
	}
	headers["x-amzn-trace-id"] = traceID(now)

	rawPath := r.URL.EscapedPath()
	routeKey, params := l.h.RouteFor(r.Method, rawPath)
	var query map[string]string
	if r.URL.RawQuery != "" {
		v, _ := url.ParseQuery(r.URL.RawQuery)
		query = make(map[string]string, len(v))
		for k, vs := range v {
			query[k] = strings.Join(vs, ",")
		}
	}
	domainPrefix, _, _ := strings.Cut(r.Host, ".")
	ev := events.APIGatewayV2HTTPRequest{
		Version:               "2.0",
		RouteKey:              routeKey,
		RawPath:               rawPath,
		RawQueryString:        r.URL.RawQuery,
		Cookies:               cookies,
		Headers:               headers,
		QueryStringParameters: query,
		PathParameters:        params,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey:     routeKey,
			AccountID:    testenv.AccountID,
			Stage:        "$default",
			RequestID:    requestID,
			APIID:        "local",
			DomainName:   r.Host,
			DomainPrefix: domainPrefix,
			Time:         now.UTC().Format("02/Jan/2006:15:04:05 -0700"),
			TimeEpoch:    now.UnixMilli(),
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{
				Method:    r.Method,
				Path:      r.URL.Path,
				Protocol:  r.Proto,
				SourceIP:  sourceIP,
				UserAgent: r.UserAgent(),
			},
		},
	}
	if claims != nil {
		ev.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
			JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{
				Claims: claims,
				Scopes: apigw.Scopes(claims["scope"]),
			},
		}
	}
	if len(body) > 0 {
		if utf8.Valid(body) {
			ev.Body = string(body)
		} else {
			ev.Body = base64.StdEncoding.EncodeToString(body)
			ev.IsBase64Encoded = true
		}
	}
	return ev
}

func (l *Server) write(w http.ResponseWriter, requestID string, resp events.APIGatewayV2HTTPResponse) {
	body := []byte(resp.Body)
	if resp.IsBase64Encoded {
		b, err := base64.StdEncoding.DecodeString(resp.Body)
		if err != nil {
			resp = events.APIGatewayV2HTTPResponse{StatusCode: http.StatusInternalServerError,
				Headers: map[string]string{"Content-Type": "application/json"}}
			b = []byte(`{"message":"Internal Server Error"}`)
		}
		body = b
	}
	h := w.Header()
	for k, v := range resp.Headers {
		h.Set(k, v)
	}
	for k, vs := range resp.MultiValueHeaders {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	for _, c := range resp.Cookies {
		h.Add("Set-Cookie", c)
	}
	h.Set("Apigw-Requestid", requestID)
	status := resp.StatusCode
	if status == 0 {
		status = http.StatusInternalServerError
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// traceID looks like the X-Amzn-Trace-Id API Gateway adds.
func traceID(now time.Time) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return fmt.Sprintf("Root=1-%08x-%s", now.Unix(), hex.EncodeToString(b))
}
