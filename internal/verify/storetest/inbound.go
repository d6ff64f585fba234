package storetest

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onejob/onejob/internal/lifecycle"
)

// The inbound log (review N-L1): a provider's webhook delivery is taken
// once while its signature lives, by (provider, webhook-id); a copy of it
// is refused with nothing written, whoever sends it; after its expiry's
// second it may be taken again; a take retried after a lost reply is its
// own; forgetting gives back only the take's own record.

// delivery is provider's delivery id, its signature stale after at(life).
func delivery(provider, id string, life int, token string) lifecycle.InboundDelivery {
	return lifecycle.InboundDelivery{Provider: provider, ID: id, Expires: at(life), Token: token}
}

func take(t *testing.T, st Store, d lifecycle.InboundDelivery, now time.Time) bool {
	t.Helper()
	taken, err := st.TakeInbound(context.Background(), d, now)
	if err != nil {
		t.Fatalf("take %s/%s (%s) at %v: %v", d.Provider, d.ID, d.Token, now, err)
	}
	return taken
}

func forget(t *testing.T, st Store, d lifecycle.InboundDelivery) {
	t.Helper()
	if err := st.ForgetInbound(context.Background(), d); err != nil {
		t.Fatalf("forget %s/%s (%s): %v", d.Provider, d.ID, d.Token, err)
	}
}

func inboundHeld(t *testing.T, st Store, want int) {
	t.Helper()
	if c := st.Count(t); c.Inbound != want {
		t.Fatalf("store holds %d deliveries, want %d", c.Inbound, want)
	}
}

var inboundTests = []test{
	{"ADeliveryIsTakenOnceWhileItsSignatureLives", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		if !take(t, st, delivery("hook", "msg_1", 300, "t1"), at(0)) {
			t.Fatal("a first delivery was not taken")
		}
		// A copy, whoever sends it, is refused through its expiry's second.
		for _, now := range []time.Time{at(0), at(299), at(300), at(300).Add(999 * time.Millisecond)} {
			if take(t, st, delivery("hook", "msg_1", 300, "t2"), now) {
				t.Fatalf("a copy was taken again at %v, before its signature went stale at %v", now, at(300))
			}
		}
		inboundHeld(t, st, 1)
		// Past it, a retry signed anew (the same webhook-id) is taken, and
		// its own copies are refused for its own life.
		if !take(t, st, delivery("hook", "msg_1", 601, "t3"), at(301)) {
			t.Fatal("a delivery whose record expired was not taken again")
		}
		if take(t, st, delivery("hook", "msg_1", 601, "t4"), at(400)) {
			t.Fatal("a copy of the retry was taken")
		}
		inboundHeld(t, st, 1)
	}},
	{"ProvidersAndIDsAreApart", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		long := strings.Repeat("x", 3000)
		for _, d := range []lifecycle.InboundDelivery{
			delivery("hook", "msg_1", 300, "a"),
			delivery("openai", "msg_1", 300, "b"),
			delivery("hook", "msg_1 ", 300, "c"),
			delivery("hook", long, 300, "d"),
			delivery("hook", long[:2999], 300, "e"),
		} {
			if !take(t, st, d, at(0)) {
				t.Fatalf("%s's delivery of %d bytes was refused as a copy of another", d.Provider, len(d.ID))
			}
		}
		if take(t, st, delivery("hook", long, 300, "f"), at(1)) {
			t.Fatal("a copy of a long id was taken")
		}
		inboundHeld(t, st, 5)
	}},
	{"ATakeRetriedAfterALostReplyIsItsOwn", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		d := delivery("hook", "msg_1", 300, "t1")
		if !take(t, st, d, at(0)) || !take(t, st, d, at(1)) {
			t.Fatal("a take's own write, repeated, was not taken")
		}
		if take(t, st, delivery("hook", "msg_1", 300, "t2"), at(1)) {
			t.Fatal("another take's copy was taken")
		}
		inboundHeld(t, st, 1)
	}},
	{"ForgettingGivesBackOnlyTheTakesOwn", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		first := delivery("hook", "msg_1", 300, "t1")
		take(t, st, first, at(0))
		forget(t, st, first)
		inboundHeld(t, st, 0)
		// The provider's retry of a delivery whose taking failed.
		retry := delivery("hook", "msg_1", 305, "t2")
		if !take(t, st, retry, at(5)) {
			t.Fatal("a forgotten delivery's retry was not taken")
		}
		forget(t, st, first)                                   // not the record there: left alone
		forget(t, st, delivery("hook", "msg_2", 300, "never")) // nothing there
		if take(t, st, delivery("hook", "msg_1", 305, "t3"), at(6)) {
			t.Fatal("forgetting another take's delivery removed the record")
		}
		inboundHeld(t, st, 1)
	}},
	{"OneOfConcurrentCopiesIsTaken", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		const copies = 6
		for round := range st.rounds() {
			id := "msg_" + string(rune('a'+round))
			var taken atomic.Int32
			var wg sync.WaitGroup
			for c := range copies {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ok, err := st.TakeInbound(context.Background(), delivery("hook", id, 300, id+"-"+string(rune('0'+c))), at(0))
					if err != nil {
						t.Errorf("take: %v", err)
					}
					if ok {
						taken.Add(1)
					}
				}()
			}
			wg.Wait()
			if n := taken.Load(); n != 1 {
				t.Fatalf("round %d: %d of %d concurrent copies taken, want 1", round, n, copies)
			}
		}
		inboundHeld(t, st, st.rounds())
	}},
	{"PurgeDeletesOnlyStaleDeliveries", func(t *testing.T, fresh func(*testing.T) Store) {
		st := fresh(t)
		take(t, st, delivery("hook", "msg_1", 300, "t1"), at(0))
		take(t, st, delivery("hook", "msg_2", 900, "t2"), at(0))
		purge := func(now time.Time, want int) {
			t.Helper()
			if _, _, err := st.Purge(context.Background(), now); err != nil {
				t.Fatal(err)
			}
			inboundHeld(t, st, want)
		}
		purge(at(300), 2) // live through its expiry's second
		purge(at(301), 1)
		if take(t, st, delivery("hook", "msg_2", 900, "t3"), at(301)) {
			t.Fatal("a live delivery's copy was taken after a purge")
		}
	}},
}
