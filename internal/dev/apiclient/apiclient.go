// Package apiclient talks to onejob's HTTP API as one owner: the bench, the
// crash drill and the end-to-end tests all submit and read jobs through it.
package apiclient

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"time"

	"github.com/onejob/onejob/internal/dev/apigwlocal"
)

// Client sends authenticated requests to one API base URL.
type Client struct {
	base  string
	token string
	http  *http.Client
}

// New mints an HS256 token for sub (as the local server's authorizer
// expects) and returns a client using hc (one with a transport of its own when nil).
func New(base, secret, sub string, hc *http.Client, scopes ...string) (*Client, error) {
	tokens, err := apigwlocal.NewTokens(apigwlocal.TokenConfig{Secret: []byte(secret)})
	if err != nil {
		return nil, err
	}
	tok, err := tokens.Mint(apigwlocal.Grant{Subject: sub, Scopes: scopes, TTL: time.Hour})
	if err != nil {
		return nil, err
	}
	if hc == nil {
		// A transport of its own: http.DefaultTransport's idle connections
		// are closed by anything in the process (httptest.Server.Close),
		// and a POST on one closed under it is never retried.
		hc = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	return &Client{base: base, token: tok, http: hc}, nil
}

// Base is the API's base URL.
func (c *Client) Base() string { return c.base }

// Do sends one request — JSON body and Idempotency-Key when given — and
// returns the status and body; err is a transport error (no HTTP answer).
func (c *Client) Do(ctx context.Context, method, path, key string, body any) (int, http.Header, []byte, error) {
	var raw []byte
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, nil, err
		}
		raw = b
	}
	return c.send(ctx, method, path, key, raw)
}

// DoRaw sends body exactly as given, as application/json, whether or not it
// is JSON at all; it answers the status and body.
func (c *Client) DoRaw(ctx context.Context, method, path, key string, body []byte) (int, []byte, error) {
	code, _, out, err := c.send(ctx, method, path, key, body)
	return code, out, err
}

// DoWith sends one request with extra headers (a Host header sets the
// request's Host) and returns the status, headers and body.
func (c *Client) DoWith(ctx context.Context, method, path string, header http.Header, body []byte) (int, http.Header, []byte, error) {
	return c.sendWith(ctx, method, path, "", body, header)
}

func (c *Client) send(ctx context.Context, method, path, key string, body []byte) (int, http.Header, []byte, error) {
	return c.sendWith(ctx, method, path, key, body, nil)
}

func (c *Client) sendWith(ctx context.Context, method, path, key string, body []byte, header http.Header) (int, http.Header, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for name, values := range header {
		if name == "Host" {
			req.Host = values[0]
			continue
		}
		req.Header[name] = values
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, out, err
}
