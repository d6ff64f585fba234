package jwtverify

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// keys holds the issuer's signing keys: fetched over HTTPS from the
// issuer (its OpenID discovery document names the key set, or the
// configuration does), kept for refreshEvery, fetched again at most once
// per minInterval whatever the tokens say (an unknown kid, a failed
// fetch), and trusted for at most maxStale while fetches fail.
//
// sem is a one-slot semaphore guarding every field below it: whoever
// holds it may fetch, so concurrent misses wait for one fetch instead of
// each making their own, and a waiter can still give up with its context.
type keys struct {
	issuer  string
	jwksURL string // configured; empty: discovered
	client  *http.Client
	maxBody int64
	timeout time.Duration
	now     func() time.Time
	log     *slog.Logger

	refreshEvery, minInterval, maxStale time.Duration

	sem        chan struct{}
	discovered string // the key set's URL from discovery, once read
	set        *keySet
	lastFetch  time.Time // the last fetch tried, whatever came of it
}

// keySet is one fetched key set, by kid.
type keySet struct {
	byKID   map[string][]publicKey
	fetched time.Time
}

// publicKey is one usable signing key; alg is the key's own "alg", empty
// when it names none (then any algorithm its type fits).
type publicKey struct {
	alg string
	key any // *rsa.PublicKey or *ecdsa.PublicKey
}

// errUnknownKey: no key of the set has the token's kid (and fits its alg),
// even after a fetch, or a fetch was made too recently to make another.
var errUnknownKey = errors.New("jwtverify: no signing key for the token's kid")

// key returns the key that verifies a token with kid, signed with alg.
func (k *keys) key(ctx context.Context, kid, alg string) (any, error) {
	select {
	case k.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, unavailable(ctx.Err())
	}
	defer func() { <-k.sem }()

	now := k.now()
	if k.set != nil && now.Sub(k.set.fetched) < k.refreshEvery {
		if key, ok := k.set.find(kid, alg); ok {
			return key, nil
		}
	}
	// Stale, empty, or the kid is new (a rotated key): fetch, but never
	// more often than minInterval, so tokens naming made-up kids cannot
	// make this function hammer the issuer.
	var fetchErr error
	if k.lastFetch.IsZero() || now.Sub(k.lastFetch) >= k.minInterval {
		k.lastFetch = now
		if fetchErr = k.fetch(ctx); fetchErr != nil {
			k.log.WarnContext(ctx, "jwks_fetch_failed", "issuer", k.issuer, "error", fetchErr.Error())
		}
	}
	if k.set == nil || now.Sub(k.set.fetched) >= k.maxStale {
		if fetchErr == nil {
			fetchErr = errors.New("the issuer's keys could not be fetched recently")
		}
		return nil, unavailable(fetchErr)
	}
	if key, ok := k.set.find(kid, alg); ok {
		return key, nil
	}
	return nil, errUnknownKey
}

// unavailable marks a failure to get the issuer's keys: not the token's
// fault, so not a 401 (the handler answers 503 and the client retries).
func unavailable(err error) error { return fmt.Errorf("%w: %w", ErrKeysUnavailable, err) }

func (k *keys) fetch(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, k.timeout)
	defer cancel()
	u := k.jwksURL
	if u == "" {
		u = k.discovered
	}
	if u == "" {
		d, err := k.discover(ctx)
		if err != nil {
			return err
		}
		k.discovered, u = d, d
	}
	body, err := k.get(ctx, u)
	if err != nil {
		// The issuer may have moved its keys: read discovery again next time.
		k.discovered = ""
		return fmt.Errorf("key set: %w", err)
	}
	set, skipped, err := parseSet(body)
	if err != nil {
		return fmt.Errorf("key set %s: %w", u, err)
	}
	set.fetched = k.now()
	k.set = set
	k.log.InfoContext(ctx, "jwks_fetched", "issuer", k.issuer, "kids", len(set.byKID), "skipped_keys", skipped)
	return nil
}

// discover reads the issuer's OpenID Provider Configuration (OpenID
// Connect Discovery 1.0 §4): its issuer must be ours exactly (§4.3), and
// its key set must be served over HTTPS by the issuer's own host, so
// nothing beyond the issuer is ever fetched (a configured JWKSURL is the
// operator's explicit exception).
func (k *keys) discover(ctx context.Context) (string, error) {
	u := strings.TrimSuffix(k.issuer, "/") + "/.well-known/openid-configuration"
	body, err := k.get(ctx, u)
	if err != nil {
		return "", fmt.Errorf("discovery: %w", err)
	}
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return "", fmt.Errorf("discovery %s: %w", u, err)
	}
	if doc.Issuer != k.issuer {
		return "", fmt.Errorf("discovery %s names issuer %q, not %q", u, doc.Issuer, k.issuer)
	}
	ju, err := url.Parse(doc.JWKSURI)
	iu, _ := url.Parse(k.issuer) // validated by New
	if err != nil || ju.Scheme != "https" || !strings.EqualFold(ju.Host, iu.Host) {
		return "", fmt.Errorf("discovery %s: jwks_uri %q is not an https URL on the issuer's host", u, doc.JWKSURI)
	}
	return doc.JWKSURI, nil
}

// get reads a small JSON document: 200 only (redirects are not
// followed), at most maxBody bytes.
func (k *keys) get(ctx context.Context, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := k.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return nil, fmt.Errorf("GET %s: status %d", u, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, k.maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	if int64(len(body)) > k.maxBody {
		return nil, fmt.Errorf("GET %s: body over %d bytes", u, k.maxBody)
	}
	return body, nil
}

// jwk is one JSON Web Key (RFC 7517 §4; RFC 7518 §6 for the parameters).
type jwk struct {
	Kty string `json:"kty"`
	Use string `json:"use"`
	Alg string `json:"alg"`
	Kid string `json:"kid"`
	N   string `json:"n"`
	E   string `json:"e"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

// minRSABits is RFC 7518 §3.3's floor for RS* keys.
const minRSABits = 2048

// parseSet keeps the set's signing keys that have a kid and that this
// package can use; the others are counted as skipped (an encryption key,
// an unknown type, a weak or malformed key). A set with none is an error.
func parseSet(body []byte) (*keySet, int, error) {
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, 0, err
	}
	set := &keySet{byKID: map[string][]publicKey{}}
	skipped := 0
	for _, raw := range doc.Keys {
		var j jwk
		if json.Unmarshal(raw, &j) != nil || j.Kid == "" || (j.Use != "" && j.Use != "sig") {
			skipped++
			continue
		}
		key, err := j.publicKey()
		if err != nil || (j.Alg != "" && !fits(j.Alg, key)) {
			skipped++
			continue
		}
		set.byKID[j.Kid] = append(set.byKID[j.Kid], publicKey{alg: j.Alg, key: key})
	}
	if len(set.byKID) == 0 {
		return nil, skipped, fmt.Errorf("no usable signing key among %d", len(doc.Keys))
	}
	return set, skipped, nil
}

func (j jwk) publicKey() (any, error) {
	switch j.Kty {
	case "RSA":
		n, err := b64int(j.N)
		if err != nil {
			return nil, err
		}
		e, err := b64int(j.E)
		if err != nil {
			return nil, err
		}
		if n.BitLen() < minRSABits || !e.IsInt64() || e.Int64() < 3 || e.Int64() > 1<<31-1 || e.Bit(0) == 0 {
			return nil, errors.New("weak or malformed RSA key")
		}
		return &rsa.PublicKey{N: n, E: int(e.Int64())}, nil
	case "EC":
		var curve elliptic.Curve
		switch j.Crv {
		case "P-256":
			curve = elliptic.P256()
		case "P-384":
			curve = elliptic.P384()
		case "P-521":
			curve = elliptic.P521()
		default:
			return nil, fmt.Errorf("curve %q", j.Crv)
		}
		size := (curve.Params().BitSize + 7) / 8
		x, errX := base64.RawURLEncoding.DecodeString(j.X)
		y, errY := base64.RawURLEncoding.DecodeString(j.Y)
		if errX != nil || errY != nil || len(x) != size || len(y) != size {
			return nil, errors.New("malformed EC point")
		}
		// Refuses a point not on the curve.
		return ecdsa.ParseUncompressedPublicKey(curve, append(append([]byte{4}, x...), y...))
	}
	return nil, fmt.Errorf("key type %q", j.Kty)
}

func b64int(s string) (*big.Int, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) == 0 {
		return nil, errors.New("malformed integer")
	}
	return new(big.Int).SetBytes(b), nil
}

// fits reports whether key can verify a signature made with alg.
func fits(alg string, key any) bool {
	switch alg {
	case "RS256", "RS384", "RS512":
		_, ok := key.(*rsa.PublicKey)
		return ok
	case "ES256", "ES384", "ES512":
		ec, ok := key.(*ecdsa.PublicKey)
		if !ok {
			return false
		}
		want := map[string]elliptic.Curve{"ES256": elliptic.P256(), "ES384": elliptic.P384(), "ES512": elliptic.P521()}[alg]
		return ec.Curve == want
	}
	return false
}

// find returns the first of kid's keys that fits alg.
func (s *keySet) find(kid, alg string) (any, bool) {
	for _, k := range s.byKID[kid] {
		if (k.alg == "" || k.alg == alg) && fits(alg, k.key) {
			return k.key, true
		}
	}
	return nil, false
}
