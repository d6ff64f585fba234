package rie

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/golang-jwt/jwt/v5"

	"github.com/onejob/onejob/infra/permissions"
	"github.com/onejob/onejob/internal/deploy"
	"github.com/onejob/onejob/internal/dynamo"
)

// testIssuer is a loopback identity provider over TLS whose keys the
// stream function's real bootstrap fetches as it would its issuer's: the
// function trusts its certificate through SSL_CERT_FILE (Go's system
// roots on Linux), and env points the function at it.
type testIssuer struct {
	env     map[string]string
	key     *rsa.PrivateKey
	url     string
	fetches atomic.Int32
}

func newTestIssuer(t *testing.T) *testIssuer {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	is := &testIssuer{key: key}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/.well-known/openid-configuration":
			_ = json.NewEncoder(w).Encode(map[string]string{"issuer": is.url, "jwks_uri": is.url + "keys"})
		case "/keys":
			is.fetches.Add(1)
			b64 := base64.RawURLEncoding.EncodeToString
			_ = json.NewEncoder(w).Encode(map[string]any{"keys": []any{map[string]string{"kty": "RSA", "kid": "k1", "use": "sig",
				"n": b64(key.N.Bytes()), "e": b64(big.NewInt(int64(key.E)).Bytes())}}})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	is.url = srv.URL + "/"
	ca := filepath.Join(t.TempDir(), "issuer.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	is.env = map[string]string{deploy.EnvJWTIssuer: is.url, "SSL_CERT_FILE": ca,
		// Open streams count against the owner's held requests.
		deploy.EnvQuotaHeldRequests: "5"}
	return is
}

// token signs sub's token with the issuer's key, naming kid.
func (is *testIssuer) token(t *testing.T, sub, kid string, exp time.Time) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"iss": is.url, "aud": LocalAudience, "sub": sub,
		"iat": time.Now().Add(-time.Minute).Unix(), "exp": exp.Unix()})
	tok.Header["kid"] = kid
	s, err := tok.SignedString(is.key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// streamEvent is events/stream-no-token.json with the token, asking for
// the long-poll form, answered after at most wait seconds.
func streamEvent(t *testing.T, root, token string, wait int) []byte {
	t.Helper()
	base, err := os.ReadFile(filepath.Join(root, "events", "stream-no-token.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ev events.LambdaFunctionURLRequest
	if err := json.Unmarshal(base, &ev); err != nil {
		t.Fatal(err)
	}
	ev.Headers["authorization"] = "Bearer " + token
	ev.Headers["accept"] = "application/json"
	ev.RawQueryString = "wait=" + strconv.Itoa(wait)
	event, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return event
}

// checkStreamTokens runs the stream function's real bootstrap as it is
// deployed: its token verifier (internal/jwtverify) reads the keys of the
// test's issuer over HTTPS, and the handler reads the seeded job from
// DynamoDB and counts the held request. The long-poll form (?wait=1)
// answers within a second for a pending job.
func checkStreamTokens(ctx context.Context, t *testing.T, l *Local, root string) {
	is := newTestIssuer(t)
	hour := time.Now().Add(time.Hour)
	for _, tc := range []struct {
		name, token string
		status      int
	}{
		{"Owner", is.token(t, SeedOwner, "k1", hour), http.StatusOK},
		{"AnotherOwner", is.token(t, "user-2", "k1", hour), http.StatusNotFound},
		{"Expired", is.token(t, SeedOwner, "k1", time.Now().Add(-time.Minute)), http.StatusUnauthorized},
		{"UnknownKey", is.token(t, SeedOwner, "k2", hour), http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := l.InvokeEnv(ctx, deploy.FnStream, streamEvent(t, root, tc.token, 1), is.env)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := ParseURLResponse(res.Response.Body)
			if err != nil {
				t.Fatalf("%v\nlogs:\n%s", err, res.Logs)
			}
			t.Logf("%s: %d %s; calls %v", tc.name, resp.StatusCode, resp.Body, res.Calls)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s\nlogs:\n%s", resp.StatusCode, tc.status, resp.Body, res.Logs)
			}
			actions := map[string]bool{}
			for _, c := range res.Calls {
				if !permissions.Allows(deploy.FnStream, c.Action, c.Resource) {
					t.Errorf("a call infra/permissions does not grant: %s", c)
				}
				actions[c.Action+" "+c.Resource.String()] = true
			}
			switch tc.status {
			case http.StatusOK:
				var page struct {
					Events []json.RawMessage `json:"events"`
					Done   *bool             `json:"done"`
				}
				if err := json.Unmarshal(resp.Body, &page); err != nil || page.Done == nil || *page.Done {
					t.Errorf("not a page of a job still pending: %s (%v)", resp.Body, err)
				}
				jobs := permissions.Resource{Kind: permissions.KindTable, Name: dynamo.JobsTable().Logical}
				owners := permissions.Resource{Kind: permissions.KindTable, Name: dynamo.OwnersTable().Logical}
				for _, want := range []string{"dynamodb:GetItem " + jobs.String(), "dynamodb:UpdateItem " + owners.String()} {
					if !actions[want] {
						t.Errorf("no %s among %v", want, res.Calls)
					}
				}
			case http.StatusUnauthorized:
				if len(res.Calls) != 0 {
					t.Errorf("AWS calls for a refused token: %v", res.Calls)
				}
			}
		})
	}
	if is.fetches.Load() == 0 {
		t.Error("the function never fetched the issuer's keys")
	}
}
