package deploy_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/onejob/onejob/internal/deploy"
)

func TestOwnURL(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	builds := map[string]int{}
	h := deploy.OwnURL(func(base string) (http.Handler, error) {
		mu.Lock()
		builds[base]++
		mu.Unlock()
		if base == "https://bad.example" {
			return nil, errors.New("refused")
		}
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, base) }), nil
	})
	get := func(host string) (int, string) {
		t.Helper()
		r := httptest.NewRequest(http.MethodGet, "https://"+host+"/v1/jobs/j/stream", nil)
		// What the client says its host is counts for nothing: lambdaurl
		// puts the function URL's domain in the request's URL.
		r.Header.Set("Host", "evil.example")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code, w.Body.String()
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if code, body := get("abc.lambda-url.eu-west-1.on.aws"); code != 200 || body != "https://abc.lambda-url.eu-west-1.on.aws" {
				t.Errorf("%d %q", code, body)
			}
		})
	}
	wg.Wait()
	if code, _ := get("bad.example"); code != http.StatusInternalServerError {
		t.Errorf("a base the handler refuses: %d, want 500", code)
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return builds["https://abc.lambda-url.eu-west-1.on.aws"]
	}
	n := count()
	if n < 1 || n > 8 {
		t.Errorf("built %d times for one domain by 8 requests", n)
	}
	// Once built, kept: the sandbox's next requests build nothing.
	for range 3 {
		get("abc.lambda-url.eu-west-1.on.aws")
	}
	if count() != n {
		t.Errorf("built again for a domain already served: %d, then %d", n, count())
	}
}
