package rie

import (
	"bytes"
	"testing"
)

func TestParseURLResponse(t *testing.T) {
	t.Parallel()
	raw := append([]byte(`{"statusCode":401,"headers":{"Content-Type":"application/problem+json"}}`), make([]byte, 8)...)
	raw = append(raw, `{"type":"x"}`...)
	r, err := ParseURLResponse(raw)
	if err != nil || r.StatusCode != 401 || r.Headers["Content-Type"] != "application/problem+json" || !bytes.Equal(r.Body, []byte(`{"type":"x"}`)) {
		t.Fatalf("%+v %q %v", r, r.Body, err)
	}
	for _, bad := range []string{`{"statusCode":200}`, "\x00\x00\x00\x00\x00\x00\x00\x00body", `{"statusCode":"x"}` + "\x00\x00\x00\x00\x00\x00\x00\x00"} {
		if _, err := ParseURLResponse([]byte(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}
