package apigw

import (
	"testing"
	"time"

	"github.com/onejob/onejob/internal/job"
)

// An owner sees one class for a try that got no HTTP answer, and no
// latency: which transport error it was and how long it took would make
// the sender a port scanner. Operators keep both; answered tries are shown
// to both as they came.
func TestOwnersSeeNoTransportDetail(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	d := job.Delivery{Tries: []job.Try{
		{At: at, Error: "connection_refused", Latency: 3 * time.Millisecond},
		{At: at, Error: "timeout", Latency: 15 * time.Second},
		{At: at, Error: "tls", Latency: 40 * time.Millisecond},
		{At: at, Status: 500, Latency: 120 * time.Millisecond},
	}}
	cases := []struct {
		name   string
		v      viewer
		errors []string
		ms     []int64
	}{
		{"Owner", viewer{}, []string{"unreachable", "unreachable", "unreachable", ""}, []int64{0, 0, 0, 120}},
		{"Operator", viewer{admin: true}, []string{"connection_refused", "timeout", "tls", ""}, []int64{3, 15000, 40, 120}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := c.v.deliveryOf(d).Tries
			for i, tr := range got {
				if tr.Error != c.errors[i] || tr.LatencyMS != c.ms[i] {
					t.Fatalf("try %d = %+v, want error %q latency %d", i, tr, c.errors[i], c.ms[i])
				}
			}
		})
	}
}
