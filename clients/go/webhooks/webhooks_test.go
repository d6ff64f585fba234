package webhooks_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/onejob/onejob/clients/go/webhooks"
)

// The Standard Webhooks reference libraries' fixed vector.
const (
	vectorSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTS     = 1614265330
	vectorBody   = `{"test": 2432232314}`
	vectorSig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func TestSignMatchesTheSpecVector(t *testing.T) {
	t.Parallel()
	got, err := webhooks.Sign(vectorSecret, vectorID, time.Unix(vectorTS, 0), []byte(vectorBody))
	if err != nil {
		t.Fatal(err)
	}
	if got != vectorSig {
		t.Fatalf("Sign = %s, want %s", got, vectorSig)
	}
}

func TestVerify(t *testing.T) {
	t.Parallel()
	at := time.Unix(vectorTS, 0)
	headers := func(id, ts, sig string) http.Header {
		h := http.Header{}
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", ts)
		h.Set("webhook-signature", sig)
		return h
	}
	cases := []struct {
		name string
		h    http.Header
		body string
		now  time.Time
		want error
	}{
		{"SpecVector", headers(vectorID, "1614265330", vectorSig), vectorBody, at, nil},
		{"AmongOthers", headers(vectorID, "1614265330", "v2,abc v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= "+vectorSig), vectorBody, at, nil},
		{"BadSignature", headers(vectorID, "1614265330", "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="), vectorBody, at, webhooks.ErrNoMatch},
		{"PartialSignature", headers(vectorID, "1614265330", "v1,"), vectorBody, at, webhooks.ErrNoMatch},
		{"OtherBody", headers(vectorID, "1614265330", vectorSig), `{"test":2432232314}`, at, webhooks.ErrNoMatch},
		{"OtherID", headers("msg_other", "1614265330", vectorSig), vectorBody, at, webhooks.ErrNoMatch},
		{"FiveMinutesOld", headers(vectorID, "1614265330", vectorSig), vectorBody, at.Add(5 * time.Minute), nil},
		{"TooOld", headers(vectorID, "1614265330", vectorSig), vectorBody, at.Add(5*time.Minute + time.Second), webhooks.ErrTooOld},
		{"TooNew", headers(vectorID, "1614265330", vectorSig), vectorBody, at.Add(-5*time.Minute - time.Second), webhooks.ErrTooNew},
		{"BadTimestamp", headers(vectorID, "soon", vectorSig), vectorBody, at, webhooks.ErrInvalidTimestamp},
		{"MissingHeaders", http.Header{}, vectorBody, at, webhooks.ErrMissingHeaders},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			v, err := webhooks.NewVerifier(vectorSecret)
			if err != nil {
				t.Fatal(err)
			}
			v.NowFunc = func() time.Time { return c.now }
			if err := v.Verify(c.h, []byte(c.body)); !errors.Is(err, c.want) || (c.want == nil && err != nil) {
				t.Fatalf("Verify = %v, want %v", err, c.want)
			}
		})
	}
}

func TestHeadersSignWithEverySecret(t *testing.T) {
	t.Parallel()
	other, err := webhooks.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(vectorTS, 0)
	h, err := webhooks.Headers([]string{other, vectorSecret}, vectorID, at, []byte(vectorBody))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{other, vectorSecret} {
		v, err := webhooks.NewVerifier(s)
		if err != nil {
			t.Fatal(err)
		}
		v.NowFunc = func() time.Time { return at }
		if err := v.Verify(h, []byte(vectorBody)); err != nil {
			t.Fatalf("secret %s…: %v", s[:10], err)
		}
	}
}

func TestSecretsAreRefused(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "whsec_", "whsec_!!!"} {
		if _, err := webhooks.NewVerifier(s); !errors.Is(err, webhooks.ErrBadSecret) {
			t.Errorf("NewVerifier(%q) = %v, want ErrBadSecret", s, err)
		}
	}
}
