package lifecycle_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onejob/onejob/clients/go/webhooks"
	"github.com/onejob/onejob/internal/job"
	"github.com/onejob/onejob/internal/lifecycle"
	"github.com/onejob/onejob/internal/provider"
)

// Inbound deliveries (review N-L1): a verified delivery is taken once by
// its webhook-id; a copy of it within its signature's life, however it is
// sent again, is a duplicate with no provider read and no job write.

// signedDelivery is one delivery as its provider posted it.
type signedDelivery struct {
	header http.Header
	body   []byte
	work   string // the work it names
	id     string // its webhook-id
}

// asyncKind is one asynchronous provider kind on its rig: its deliveries
// as posted, and how often its work was read.
type asyncKind struct {
	name  string
	rig   *asyncTasks
	sent  func() []signedDelivery // the deliveries posted, in order
	reads func(work string) int
	step  func() // the provider's work up to the rig's clock
	drop  func(bool)
	// waitFor returns once cond holds, checked at each change of the
	// provider's records.
	waitFor func(ctx context.Context, cond func() bool) error
}

func asyncKinds(t *testing.T) []asyncKind {
	t.Helper()
	oa, hook := newAsyncRig(t), newHookAsyncRig(t)
	return []asyncKind{{
		name: "OpenAIBackground", rig: oa.asyncTasks,
		sent: func() []signedDelivery {
			var out []signedDelivery
			for _, e := range oa.sim.Events() {
				for _, d := range e.Deliveries {
					if !d.Dropped {
						out = append(out, signedDelivery{d.Header, e.Body, e.ResponseID, e.WebhookID})
					}
				}
			}
			return out
		},
		reads: func(work string) int { r, _ := oa.sim.Get(work); return r.Reads },
		step:  oa.sim.Step, drop: oa.sim.DropWebhooks, waitFor: oa.sim.WaitFor,
	}, {
		name: "WebhookAsync", rig: hook.asyncTasks,
		sent: func() []signedDelivery {
			var out []signedDelivery
			for _, c := range hook.sim.Callbacks() {
				for _, d := range c.Deliveries {
					if !d.Dropped {
						out = append(out, signedDelivery{d.Header, c.Body, c.WorkID, c.WebhookID})
					}
				}
			}
			return out
		},
		reads: func(work string) int { r, _ := hook.sim.Get(work); return r.Reads },
		step:  hook.sim.Step, drop: hook.sim.DropCallbacks, waitFor: hook.sim.WaitFor,
	}}
}

// TestACopyOfATakenDeliveryIsNotReadAgain: two owners' jobs on each
// asynchronous kind end by their webhooks; then each delivery, replayed as
// captured (the same bytes, headers and signature) and signed anew under
// its webhook-id (a provider's retry), is a duplicate: the work is not
// read again, the job not written, and only the first copy was recorded.
// A forged or stale copy is refused unverified and records nothing.
func TestACopyOfATakenDeliveryIsNotReadAgain(t *testing.T) {
	t.Parallel()
	for _, k := range asyncKinds(t) {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			r := k.rig
			jobs := []job.Job{r.createFor(t, "owner-a"), r.createFor(t, "owner-b")}
			for _, j := range jobs {
				r.runUntilParked(t, j.ID)
			}
			r.clock.Advance(providerWork)
			k.step()
			for range jobs {
				if a := r.event(t); a.err != nil || a.outcome != lifecycle.EventApplied {
					t.Fatalf("webhook: %+v", a)
				}
			}
			// The provider records a delivery once it has its answer.
			if err := k.waitFor(t.Context(), func() bool { return len(k.sent()) >= 2 }); err != nil {
				t.Fatal(err)
			}
			sent := k.sent()
			if len(sent) != 2 || r.st.InboundCount() != 2 {
				t.Fatalf("%d deliveries posted, %d recorded; want 2 and 2", len(sent), r.st.InboundCount())
			}
			revisions := map[string]int64{}
			for _, j := range jobs {
				got := r.get(t, j.ID)
				if got.Status != job.StatusSucceeded {
					t.Fatalf("job %s: %s", got.ID, got.Status)
				}
				revisions[got.ID] = got.Revision
			}
			r.clock.Advance(time.Minute)
			for _, d := range sent {
				read := k.reads(d.work)
				if read == 0 {
					t.Fatalf("work %s was never read: the first delivery did not reach its provider", d.work)
				}
				resigned, err := webhooks.Headers([]string{asyncSecret}, d.id, r.clock.Now(), d.body)
				if err != nil {
					t.Fatal(err)
				}
				for _, h := range []http.Header{d.header, d.header, resigned} {
					out, err := r.tasks.ProviderEvent(t.Context(), k.rig.name, h.Clone(), d.body)
					if err != nil || out != lifecycle.EventDuplicate {
						t.Fatalf("a copy of delivery %s: %q, %v; want duplicate", d.id, out, err)
					}
				}
				if n := k.reads(d.work); n != read {
					t.Fatalf("copies of delivery %s read work %s %d more times", d.id, d.work, n-read)
				}
				forged, err := webhooks.Headers([]string{"whsec_" + "c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0"}, "msg_forged", r.clock.Now(), d.body)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := r.tasks.ProviderEvent(t.Context(), k.rig.name, forged, d.body); !errors.Is(err, lifecycle.ErrEventUnverified) {
					t.Fatalf("forged copy: %v, want unverified", err)
				}
			}
			for _, j := range jobs {
				if got := r.get(t, j.ID); got.Revision != revisions[j.ID] {
					t.Fatalf("a copy wrote job %s: revision %d → %d", j.ID, revisions[j.ID], got.Revision)
				}
			}
			// Past its signature's life a copy is stale, whatever the log
			// holds: the log never needs to keep it longer.
			r.clock.Advance(provider.EventTolerance)
			if _, err := r.tasks.ProviderEvent(t.Context(), k.rig.name, sent[0].header.Clone(), sent[0].body); !errors.Is(err, lifecycle.ErrEventUnverified) {
				t.Fatalf("a stale copy: %v, want unverified", err)
			}
			if n := r.st.InboundCount(); n != 2 {
				t.Fatalf("%d deliveries recorded, want the 2 taken", n)
			}
		})
	}
}

// failingReads fails the first fails reads of the work by id, as a
// provider's outage would.
type failingReads struct {
	provider.Async
	fails atomic.Int32
}

func (f *failingReads) Retrieve(ctx context.Context, id string) (provider.Work, error) {
	if f.fails.Add(-1) >= 0 {
		return provider.Work{}, errors.New("503 Service Unavailable")
	}
	return f.Async.Retrieve(ctx, id)
}

// TestADeliveryWhoseTakingFailedIsTakenOnItsRetry: when reading the work
// a delivery names fails, the route answers no 2xx and gives the
// delivery back, so the provider's retry (the same webhook-id, signed
// anew) is taken and ends the job rather than being answered duplicate.
func TestADeliveryWhoseTakingFailedIsTakenOnItsRetry(t *testing.T) {
	t.Parallel()
	for _, k := range asyncKinds(t) {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			r := k.rig
			k.drop(true)
			j := r.createFor(t, "owner-a")
			other := r.createFor(t, "owner-b")
			r.runUntilParked(t, j.ID)
			r.runUntilParked(t, other.ID)
			r.clock.Advance(providerWork)
			k.step()
			flaky := &failingReads{Async: r.async}
			flaky.fails.Store(1)
			tasks := r.tasksWith(t, flaky)
			rem := remoteOf(t, r.get(t, j.ID), 1)
			id := "msg_" + rem.ID
			body := eventBody(k.name, rem.ID)
			first, err := webhooks.Headers([]string{asyncSecret}, id, r.clock.Now(), body)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tasks.ProviderEvent(t.Context(), r.name, first, body); !errors.Is(err, lifecycle.ErrUnavailable) {
				t.Fatalf("a delivery whose work could not be read: %v, want unavailable", err)
			}
			if n := r.st.InboundCount(); n != 0 {
				t.Fatalf("%d deliveries recorded after a failed taking, want it given back", n)
			}
			r.clock.Advance(5 * time.Second)
			retry, err := webhooks.Headers([]string{asyncSecret}, id, r.clock.Now(), body)
			if err != nil {
				t.Fatal(err)
			}
			if out, err := tasks.ProviderEvent(t.Context(), r.name, retry, body); err != nil || out != lifecycle.EventApplied {
				t.Fatalf("the provider's retry: %q, %v; want applied", out, err)
			}
			if got := r.get(t, j.ID); got.Status != job.StatusSucceeded {
				t.Fatalf("job %s after the retry: %s", got.ID, got.Status)
			}
			if got := r.get(t, other.ID); got.Status != job.StatusRunning {
				t.Fatalf("the other owner's job %s: %s, want running (its work's delivery never came)", got.ID, got.Status)
			}
		})
	}
}

// eventBody is the webhook body kind's provider posts when work ends.
func eventBody(kind, work string) []byte {
	if kind == "OpenAIBackground" {
		return []byte(`{"object":"event","id":"evt_` + work + `","type":"response.completed","created_at":1,"data":{"id":"` + work + `"}}`)
	}
	return []byte(`{"type":"work.ended","data":{"id":"` + work + `"}}`)
}
