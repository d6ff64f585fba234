package sim

import (
	"bytes"
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/onejob/onejob/clients/go/webhooks"
)

// hookCore is what the asynchronous simulators (Responses, WebhookAsync)
// share: their clock (the caller's NowFunc sped up by Speed, plus what
// Advance added), signed webhook deliveries posted in the background until
// Close, and WaitFor's wake-ups. Its mu guards the simulator embedding it
// too.
type hookCore struct {
	nowFunc func() time.Time
	speed   int
	start   time.Time // nowFunc's time at the start, where speed counts from
	client  *http.Client
	ctx     context.Context // cancelled by Close: stops deliveries
	stop    context.CancelFunc
	flying  sync.WaitGroup

	mu      sync.Mutex
	offset  time.Duration
	closed  bool
	changed chan struct{}
}

// init sets the core up: nowFunc defaults to time.Now, speed to 1, client
// to one of its own that follows no redirect.
func (c *hookCore) init(nowFunc func() time.Time, speed int, client *http.Client) {
	if nowFunc == nil {
		nowFunc = time.Now
	}
	if client == nil {
		client = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone(),
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	c.nowFunc, c.speed, c.start, c.client = nowFunc, max(1, speed), nowFunc(), client
	c.ctx, c.stop = context.WithCancel(context.Background())
	c.changed = make(chan struct{})
}

// Close stops deliveries in flight and waits for them.
func (c *hookCore) Close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.stop()
	c.flying.Wait()
}

// Now is the simulator's clock.
func (c *hookCore) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now()
}

// now is the simulator's clock; mu is held.
func (c *hookCore) now() time.Time {
	t := c.nowFunc()
	return c.start.Add(time.Duration(c.speed) * t.Sub(c.start)).Add(c.offset)
}

// signedAt is the time a delivery is signed with: the receiver's clock
// (not sped up), moved as Advance moved the simulator's; mu is held.
func (c *hookCore) signedAt() time.Time { return c.nowFunc().Add(c.offset) }

// moveClock adds d to the simulator's clock.
func (c *hookCore) moveClock(d time.Duration) {
	c.mu.Lock()
	c.offset += d
	c.mu.Unlock()
}

// WaitFor returns once cond holds, checking it again after every change of
// the simulator's state (a submit, a status, a cancel, a delivery), or
// ctx's error.
func (c *hookCore) WaitFor(ctx context.Context, cond func() bool) error {
	for {
		c.mu.Lock()
		ch := c.changed
		c.mu.Unlock()
		if cond() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// notify wakes WaitFor; mu is held.
func (c *hookCore) notify() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// goDeliver runs deliver in the background until Close; once closed it
// records, with record, a delivery that failed. mu is held.
func (c *hookCore) goDeliver(deliver func(context.Context), record func(WebhookDelivery)) {
	if c.closed {
		record(WebhookDelivery{At: c.now(), Err: "simulator closed"})
		return
	}
	c.flying.Add(1)
	go func() {
		defer c.flying.Done()
		deliver(c.ctx)
	}()
}

// deliver posts body to url signed now with secret under id (Standard
// Webhooks), and records the delivery with record (under mu, waking
// WaitFor). mu is not held.
func (c *hookCore) deliver(ctx context.Context, url, secret, id string, body []byte, record func(WebhookDelivery)) WebhookDelivery {
	c.mu.Lock()
	at, signed := c.now(), c.signedAt()
	c.mu.Unlock()
	d := WebhookDelivery{At: at}
	header, err := webhooks.Headers([]string{secret}, id, signed, body)
	if err == nil {
		d.Header = header
		d.Status, err = c.send(ctx, url, header, body)
	}
	if err != nil {
		d.Err = err.Error()
	}
	c.mu.Lock()
	record(d)
	c.notify()
	c.mu.Unlock()
	return d
}

func (c *hookCore) send(ctx context.Context, url string, header http.Header, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header = header.Clone()
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}
