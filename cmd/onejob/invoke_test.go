package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestInvokeFlags covers what is refused before anything is started; the
// invocations themselves are tested in internal/dev/rie.
func TestInvokeFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no event", nil, "--event is required"},
		{"stray argument", []string{"--event", "events/hedge.json", "extra"}, "unexpected arguments"},
		{"missing file", []string{"--event", "events/no-such-event.json"}, "no such file"},
		{"unknown flag", []string{"--nope"}, "flag provided but not defined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			err := invokeMain(context.Background(), tc.args, &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout %q, want nothing", stdout.String())
			}
		})
	}
}
