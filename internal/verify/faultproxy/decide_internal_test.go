package faultproxy

import (
	"math"
	"testing"
)

func TestDecisionsArePerSeed(t *testing.T) {
	t.Parallel()
	decisions := func(seed uint64, rate float64) []Kind {
		p := &Proxy{cfg: Config{Seed: seed, Faults: Kinds(), Latency: 1}}
		p.SetRate(rate)
		out := make([]Kind, 20000)
		for i := range out {
			out[i], _ = p.decide(Request{Seq: uint64(i)})
		}
		return out
	}
	tests := []struct {
		name string
		rate float64
	}{{name: "NoFaults", rate: 0}, {name: "FivePercent", rate: 0.05}, {name: "Half", rate: 0.5}, {name: "Always", rate: 1}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, b, other := decisions(42, tc.rate), decisions(42, tc.rate), decisions(43, tc.rate)
			perKind := map[Kind]int{}
			differ := 0
			for i := range a {
				if a[i] != b[i] {
					t.Fatalf("seed 42 decided %v then %v for request %d", a[i], b[i], i)
				}
				if a[i] != other[i] {
					differ++
				}
				perKind[a[i]]++
			}
			faults := len(a) - perKind[None]
			if got := float64(faults) / float64(len(a)); math.Abs(got-tc.rate) > 0.01 {
				t.Fatalf("fault rate %.4f, want %.2f", got, tc.rate)
			}
			if tc.rate > 0 && tc.rate < 1 && differ == 0 {
				t.Fatal("seeds 42 and 43 decided alike")
			}
			// Every configured kind is drawn, about equally often.
			for _, k := range Kinds() {
				want := float64(faults) / float64(len(Kinds()))
				if math.Abs(float64(perKind[k])-want) > 0.2*want+5 {
					t.Fatalf("%s drawn %d times, want ≈ %.0f", k, perKind[k], want)
				}
			}
		})
	}
}

func TestSDKAttemptHeader(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, header string
		want         int
	}{
		{name: "First", header: "attempt=1; max=10", want: 1},
		{name: "Third", header: "attempt=3; max=4", want: 3},
		{name: "TTLFirst", header: "ttl=20260101T000000Z; attempt=2; max=3", want: 2},
		{name: "Missing", header: "", want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := sdkAttempt(tc.header); got != tc.want {
				t.Fatalf("sdkAttempt(%q) = %d, want %d", tc.header, got, tc.want)
			}
		})
	}
}
