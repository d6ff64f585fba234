package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/onejob/onejob/internal/apigw"
)

// Exit statuses of `onejob jobs watch`: the job's outcome, or that the
// watch ended before the job did (interrupted, or the API kept failing).
const (
	exitWatchSucceeded = 0
	exitWatchFailed    = 1
	exitWatchCancelled = 2
	exitWatchStopped   = 3
)

// Watching rides out short outages of the API once it has answered once: a
// request with no answer, a 5xx or a 429 is sent again after a pause that
// doubles from watchRetryPause up to watchMaxPause, at most watchRetries
// times in a row.
const (
	watchRetries    = 5
	watchRetryPause = time.Second
	watchMaxPause   = 10 * time.Second
)

// jobsWatch follows a job with held conditional GETs (If-None-Match with
// the last ETag, Prefer: wait=20): an unchanged job costs one request per
// 20 s and a change is answered as soon as the API sees it. It prints one
// line per change of the job's status or attempts (with --json, each new
// representation on a line), and when the job ends its attempts and
// outcome; the exit status is the outcome.
func jobsWatch(ctx context.Context, c *jobsCmd, args []string) error {
	stream := c.fs.Bool("stream", false, "print the job's answer as it forms, read from its stream_url (with --json: each event on a line)")
	pos, err := c.parse(args, "ID")
	if err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	id := pos[0]
	if *stream {
		return c.watchStream(ctx, cl, id)
	}
	var (
		etag, last string
		answered   bool // the API has answered once: the ID and token are good
		failures   int
		pause      = watchRetryPause
	)
	for {
		header := http.Header{"Prefer": {"wait=" + strconv.Itoa(int(apigw.MaxWait/time.Second))}}
		if etag != "" {
			header.Set("If-None-Match", etag)
		}
		resp, err := cl.do(ctx, apiCall{method: http.MethodGet, path: jobPath(id), header: header, hold: apigw.MaxWait})
		switch {
		case ctx.Err() != nil:
			return c.interrupted(last)
		case err != nil && answered && transient(err) && failures < watchRetries:
			failures++
			fmt.Fprintf(c.stderr, "%s; asking again in %s (%d/%d)\n", oneLine(err.Error()), pause, failures, watchRetries)
			if sleep(ctx, pause) != nil {
				return c.interrupted(last)
			}
			pause = min(2*pause, watchMaxPause)
			continue
		case err != nil:
			return err
		}
		answered, failures, pause = true, 0, watchRetryPause
		if resp.status == http.StatusNotModified {
			continue
		}
		var j jobView
		if err := decodeAPI(resp.body, &j); err != nil {
			return fmt.Errorf("the API answered with a body that is not a job: %w", err)
		}
		line := statusLine(j)
		switch {
		case c.json:
			c.printJSON(resp.body)
		case line != last:
			fmt.Fprintln(c.stdout, line)
		}
		last = line
		if terminalStatus(j.Status) {
			if !c.json {
				c.watchSummary(ctx, j)
			}
			return exitCode(outcomeExit(j.Status))
		}
		etag = resp.header.Get("ETag")
		if etag == "" {
			// Without a validator every GET answers at once: poll at the
			// pace the API suggests instead.
			after, _ := strconv.Atoi(resp.header.Get("Retry-After"))
			if sleep(ctx, time.Duration(max(after, 1))*time.Second) != nil {
				return c.interrupted(last)
			}
		}
	}
}

// interrupted ends a watch whose context ended (Ctrl-C) before the job did.
func (c *jobsCmd) interrupted(last string) error {
	fmt.Fprintf(c.stderr, "watch interrupted; last seen: %s\n", orDash(last))
	return exitCode(exitWatchStopped)
}

// watchSummary prints what the timeline leaves out once a job has ended:
// each attempt (usage, resolution), the result or error, the job's usage.
func (c *jobsCmd) watchSummary(ctx context.Context, j jobView) {
	if atts, _, err := c.getAttempts(ctx, j.ID); err != nil {
		fmt.Fprintln(c.stderr, "attempts: "+oneLine(err.Error()))
	} else {
		_ = writeAttempts(c.stdout, "  ", atts.Attempts)
	}
	if len(j.Result) > 0 {
		fmt.Fprintln(c.stdout, "  result  "+compactJSON(j.Result))
	}
	if j.Error != nil {
		fmt.Fprintln(c.stdout, "  error   "+failureText(j.Error))
	}
	if u := usageText(j.Usage); u != "" {
		fmt.Fprintln(c.stdout, "  usage   "+u)
	}
}

// outcomeExit is watch's exit status for a terminal job status.
func outcomeExit(status string) int {
	switch status {
	case "succeeded":
		return exitWatchSucceeded
	case "cancelled":
		return exitWatchCancelled
	default:
		return exitWatchFailed
	}
}

// sleep pauses for d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
