package provider_test

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/onejob/onejob/internal/provider"
)

// TestSSEReader reads event streams as the HTML standard's parsing says,
// within its bounds.
func TestSSEReader(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		stream string
		want   []provider.SSEEvent
		err    error // what follows the events
	}{
		{"DataOnly", "data: a\n\ndata: b\n\n", []provider.SSEEvent{{Data: "a"}, {Data: "b"}}, io.EOF},
		{"Named", "event: delta\ndata: {\"text\":\"x\"}\n\n", []provider.SSEEvent{{Type: "delta", Data: `{"text":"x"}`}}, io.EOF},
		{"CRLF", "event: a\r\ndata: 1\r\n\r\n", []provider.SSEEvent{{Type: "a", Data: "1"}}, io.EOF},
		{"Multiline", "data: one\ndata: two\n\n", []provider.SSEEvent{{Data: "one\ntwo"}}, io.EOF},
		{"NoSpace", "event:a\ndata:1\n\n", []provider.SSEEvent{{Type: "a", Data: "1"}}, io.EOF},
		{"CommentsAndOtherFields", ": hb\nretry: 10\nevent: a\ndata: 1\n\n: bye\n", []provider.SSEEvent{{Type: "a", Data: "1"}}, io.EOF},
		// The last event ID is the latest id field, kept by later events
		// that name none (an id holding NULL is ignored), even one set by
		// an event without data.
		{"IDs", "id: 1.2\ndata: a\n\ndata: b\n\nid: x\x00y\ndata: c\n\nid: 3\n\ndata: d\n\nid\ndata: e\n\n",
			[]provider.SSEEvent{{Data: "a", ID: "1.2"}, {Data: "b", ID: "1.2"}, {Data: "c", ID: "1.2"}, {Data: "d", ID: "3"}, {Data: "e"}}, io.EOF},
		// An event without data is not dispatched, and its type goes with it.
		{"NoData", "event: ping\n\ndata: 1\n\n", []provider.SSEEvent{{Data: "1"}}, io.EOF},
		// An event not finished by a blank line is dropped, the line cut
		// in its middle an unexpected end.
		{"Unfinished", "data: 1\n\ndata: 2\n", []provider.SSEEvent{{Data: "1"}}, io.EOF},
		{"CutMidLine", "data: 1\n\ndata: {\"a", []provider.SSEEvent{{Data: "1"}}, io.ErrUnexpectedEOF},
		{"EventTooLarge", "data: 1\n\ndata: " + strings.Repeat("x", 64) + "\n\n", []provider.SSEEvent{{Data: "1"}}, provider.ErrEventTooLarge},
		{"ManyLinesTooLarge", strings.Repeat("data: 12345678\n", 8) + "\n", nil, provider.ErrEventTooLarge},
		{"StreamTooLarge", strings.Repeat("data: 1234\n\n", 20), []provider.SSEEvent{{Data: "1234"}, {Data: "1234"}, {Data: "1234"}, {Data: "1234"}, {Data: "1234"}, {Data: "1234"}, {Data: "1234"}, {Data: "1234"}}, provider.ErrStreamTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := provider.NewSSEReader(strings.NewReader(tc.stream), 100, 48)
			var got []provider.SSEEvent
			var err error
			for {
				var ev provider.SSEEvent
				if ev, err = r.Next(); err != nil {
					break
				}
				got = append(got, ev)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("events %+v, want %+v (then %v)", got, tc.want, err)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("event %d: %+v, want %+v", i, got[i], tc.want[i])
				}
			}
			if !errors.Is(err, tc.err) {
				t.Errorf("then %v, want %v", err, tc.err)
			}
		})
	}
}
