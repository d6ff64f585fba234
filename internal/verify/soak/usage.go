package soak

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/onejob/onejob/internal/dev/testenv"
)

// Usage is one process's open file descriptors and resident memory.
type Usage struct {
	FDs    int   `json:"fds"`
	RSSKiB int64 `json:"rss_kib"`
	// HeapKiB is a node server's V8 heap in use after the collection that
	// preceded the reading (0 for onejob).
	HeapKiB int64 `json:"heap_kib,omitempty"`
	// FileKiB is the part of RSSKiB that is mapped files' pages.
	FileKiB int64 `json:"rss_file_kib"`
}

// RSSMiB is the resident set in MiB.
func (u Usage) RSSMiB() float64 { return float64(u.RSSKiB) / 1024 }

// collectGarbage has each node server (by process name: the Step
// Functions server, dynalite) run a full collection, so that the memory
// read next is what it keeps (testenv.CollectGarbage), and returns their
// heaps afterwards.
func collectGarbage(ctx context.Context, servers map[string]string) (map[string]testenv.NodeMemory, error) {
	mems := make(map[string]testenv.NodeMemory, len(servers))
	for name, ep := range servers {
		mem, err := testenv.CollectGarbage(ctx, ep)
		if err != nil {
			return mems, fmt.Errorf("%s: %w", name, err)
		}
		mems[name] = mem
	}
	return mems, nil
}

// withHeaps adds the node servers' heaps to a reading.
func withHeaps(u map[string]Usage, mems map[string]testenv.NodeMemory) {
	for name, mem := range mems {
		if v, ok := u[name]; ok {
			v.HeapKiB = mem.HeapUsedBytes / 1024
			u[name] = v
		}
	}
}

// readUsage samples every process of the stack.
func readUsage(pids map[string]int) (map[string]Usage, error) {
	out := make(map[string]Usage, len(pids))
	for name, pid := range pids {
		fds, err := testenv.OpenFDs(pid)
		if err != nil {
			return nil, fmt.Errorf("%s (pid %d): %w", name, pid, err)
		}
		rss, err := testenv.RSSKiB(pid)
		if err != nil {
			return nil, fmt.Errorf("%s (pid %d): %w", name, pid, err)
		}
		file, err := testenv.StatusKiB(pid, "RssFile")
		if err != nil {
			return nil, fmt.Errorf("%s (pid %d): %w", name, pid, err)
		}
		out[name] = Usage{FDs: fds, RSSKiB: rss, FileKiB: file}
	}
	return out, nil
}

// sampler records the highest fd count of each process between takes, and
// what the descriptors were at that moment.
type sampler struct {
	pids    map[string]int
	servers map[int]string
	mu      sync.Mutex
	max     map[string]int
	peak    map[string]string
	err     error
	stop    chan struct{}
	done    chan struct{}
}

func startSampler(pids map[string]int, servers map[int]string, every time.Duration) *sampler {
	s := &sampler{pids: pids, servers: servers, max: map[string]int{}, peak: map[string]string{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			s.sample()
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *sampler) sample() {
	u, err := readUsage(s.pids)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if s.err == nil {
			s.err = err
		}
		return
	}
	for name, v := range u {
		if v.FDs > s.max[name] {
			s.max[name] = v.FDs
			s.peak[name] = fdBreakdown(s.pids[name], s.servers)
		}
	}
}

// take returns the maxima (and what they were) since the last take and
// starts over.
func (s *sampler) take() (map[string]int, map[string]string, error) {
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	maxima, peaks, err := s.max, s.peak, s.err
	s.max, s.peak, s.err = map[string]int{}, map[string]string{}, nil
	return maxima, peaks, err
}

func (s *sampler) close() {
	close(s.stop)
	<-s.done
}

// fdBreakdown says what a process's descriptors are (see classify).
func fdBreakdown(pid int, servers map[int]string) string {
	counts, err := classify(pid, servers)
	if err != nil {
		return err.Error()
	}
	return counts.String()
}

// fdCounts counts a process's descriptors by kind: TCP connections by the
// stack's server they belong to ("in:lambda" is a connection accepted by
// the Lambda endpoint, "out:dynalite" one dialled to dynalite, a state
// other than established in parentheses), "listen", "pipe", "file", …
type fdCounts map[string]int

func (c fdCounts) String() string {
	keys := slices.Sorted(maps.Keys(c))
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+strconv.Itoa(c[k]))
	}
	return strings.Join(parts, " ")
}

// links is how many established connections between the stack's parts
// the process holds.
func (c fdCounts) links() int {
	n := 0
	for k, v := range c {
		if (strings.HasPrefix(k, "in:") || strings.HasPrefix(k, "out:")) && !strings.Contains(k, "(") {
			n += v
		}
	}
	return n
}

// classify names each of pid's open descriptors; it is what a leak report
// needs to name the leak.
func classify(pid int, servers map[int]string) (fdCounts, error) {
	targets, err := testenv.FDTargets(pid)
	if err != nil {
		return nil, err
	}
	socks, err := testenv.TCPSockets(pid)
	if err != nil {
		return nil, err
	}
	counts := fdCounts{}
	for _, target := range targets {
		switch {
		case strings.HasPrefix(target, "socket:["):
			c, ok := socks[target]
			state := ""
			if !c.Established() {
				state = "(" + c.State + ")"
			}
			switch {
			case !ok:
				counts["socket"]++
			case c.Listening():
				counts["listen"]++
			case servers[c.LocalPort] != "":
				counts["in:"+servers[c.LocalPort]+state]++
			case servers[c.RemotePort] != "":
				counts["out:"+servers[c.RemotePort]+state]++
			default:
				counts["tcp:other"+state]++
			}
		case strings.HasPrefix(target, "pipe:"):
			counts["pipe"]++
		case strings.HasPrefix(target, "anon_inode:"):
			counts["anon"]++
		default:
			counts["file"]++
		}
	}
	return counts, nil
}

// serverPorts maps the stack's listening ports to short names.
func serverPorts(e endpoints) map[int]string {
	out := map[int]string{}
	for name, raw := range map[string]string{"api": e.APIURL, "lambda": e.LambdaEndpoint, "sim": e.SimURL,
		"sfn": e.SFNEndpoint, "dynalite": e.DynamoEndpoint} {
		if u, err := url.Parse(raw); err == nil {
			if p, err := strconv.Atoi(u.Port()); err == nil {
				out[p] = name
			}
		}
	}
	return out
}
