package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/onejob/onejob/internal/apigw"
	"github.com/onejob/onejob/internal/dev/stack"
	"github.com/onejob/onejob/internal/job"
)

// bodyRow is what one kind of create body costs the API, against a plain
// create of the same size in the same run.
type bodyRow struct {
	Body  string `json:"body"`
	Bytes int    `json:"bytes"`
	// Status is what every request of the row was answered.
	Status   int     `json:"status"`
	Code     string  `json:"problem_type,omitempty"`
	Millis   float64 `json:"mean_ms"`
	Ratio    float64 `json:"ratio_to_plain_256k_create"`
	Requests int     `json:"requests"`
	// Written counts jobs the row's requests left behind (refusals: 0).
	Written int `json:"jobs_written"`
}

// worstBodies are create bodies an attacker would pick to make the API work
// hard for little: each up to the 256 KiB body limit (or just past it).
func worstBodies() []struct{ name, body string } {
	const limit = apigw.MaxBodyBytes
	fill := func(head, item, sep, tail string) string {
		var b strings.Builder
		b.WriteString(head)
		for first := true; b.Len()+len(sep)+len(item)+len(tail) <= limit; first = false {
			if !first {
				b.WriteString(sep)
			}
			b.WriteString(item)
		}
		b.WriteString(tail)
		return b.String()
	}
	return []struct{ name, body string }{
		{"long numbers (44 digits each)", fill(`{"type":"demo","input":{"prompt":"x","n":[`, "12345678901234567890123456789012345678901234", ",", `]}}`)},
		{"huge exponents (1e999999)", fill(`{"type":"demo","input":{"prompt":"x","n":[`, "1e999999", ",", `]}}`)},
		{"deep nesting", fill(`{"type":"demo","input":{"prompt":"x","n":`, "[", "", ``)},
		{"many members", fill(`{"type":"demo","input":{"prompt":"x","n":{`, `"m":0`, ",", `}}}`)},
		{"long string of escapes, in an unknown member", fill(`{"type":"demo","input":{"prompt":"x","n":"`, `\u00e9`, "", `"}}`)},
		{"long string, in the prompt", fill(`{"type":"demo","input":{"prompt":"`, "abcdefgh", "", `"}}`)},
		{"over the body limit", `{"type":"demo","input":{"prompt":"x","pad":"` + strings.Repeat("a", limit) + `"}}`},
	}
}

// measureBodies times creates of each worst-case body against plain creates
// padded to 256 KiB with insignificant whitespace, alternating rounds so
// machine-wide drift hits both, on an API without a starter.
func measureBodies(ctx context.Context, o options, dynamoURL string, logOut *slog.Logger) ([]bodyRow, error) {
	s, err := stack.Start(ctx, stack.Config{Root: o.root, APIAddr: "127.0.0.1:0", DynamoEndpoint: dynamoURL,
		TablePrefix: "bench-bodies", Logger: logOut})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	url, closeAPI, err := apiServer(s, logOut)
	if err != nil {
		return nil, err
	}
	defer closeAPI()
	const owner = "bench-bodies"
	c, err := newAPIClient(url, s.JWTSecret(), owner)
	if err != nil {
		return nil, err
	}
	small := `{"type":"demo","input":{"prompt":"plain"}}`
	plain := small[:len(small)-1] + strings.Repeat(" ", apigw.MaxBodyBytes-len(small)) + "}"
	bodies := append([]struct{ name, body string }{{"plain create, padded to 256 KiB", plain}}, worstBodies()...)
	rows := make([]bodyRow, len(bodies))
	var keys [][]string
	for i, b := range bodies {
		rows[i] = bodyRow{Body: b.name, Bytes: len(b.body)}
		keys = append(keys, nil)
	}
	const rounds, perRound = 5, 4
	run := time.Now().UnixNano()
	total := make([]time.Duration, len(bodies))
	for r := range rounds {
		for i, b := range bodies {
			for k := range perRound {
				key := fmt.Sprintf("body-%d-%d-%d-%d", run, i, r, k)
				t0 := time.Now()
				code, body, err := c.api.DoRaw(ctx, http.MethodPost, "/v1/jobs", key, []byte(b.body))
				total[i] += time.Since(t0)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", b.name, err)
				}
				if rows[i].Status == 0 {
					rows[i].Status, rows[i].Code = code, problemType(body)
				} else if rows[i].Status != code {
					return nil, fmt.Errorf("%s: answered %d and %d", b.name, rows[i].Status, code)
				}
				keys[i] = append(keys[i], key)
				rows[i].Requests++
			}
		}
	}
	for i := range rows {
		rows[i].Millis = round2(float64(total[i].Microseconds()) / 1000 / float64(rows[i].Requests))
		for _, key := range keys[i] {
			_, err := s.Store.Get(ctx, job.NewID(owner, key))
			switch {
			case err == nil:
				rows[i].Written++
			case !errors.Is(err, job.ErrNotFound):
				return nil, err
			}
		}
	}
	for i := range rows {
		rows[i].Ratio = ratio(rows[i].Millis, rows[0].Millis)
	}
	return rows, nil
}

// problemType is a problem body's type, "" for another body.
func problemType(body []byte) string {
	const marker = `"type":"` + apigw.ProblemBase
	i := strings.Index(string(body), marker)
	if i < 0 {
		return ""
	}
	rest := string(body[i+len(marker):])
	if j := strings.IndexByte(rest, '"'); j >= 0 {
		return rest[:j]
	}
	return ""
}

// checkBodies: the plain create is written, every worst-case body refused
// with nothing written.
func checkBodies(rows []bodyRow) error {
	var errs []error
	for i, r := range rows {
		switch {
		case i == 0 && (r.Status != http.StatusCreated || r.Written != r.Requests):
			errs = append(errs, fmt.Errorf("plain create: %d, %d of %d written", r.Status, r.Written, r.Requests))
		case i > 0 && (r.Status < 400 || r.Status >= 500 || r.Written != 0):
			errs = append(errs, fmt.Errorf("%s: answered %d, %d jobs written", r.Body, r.Status, r.Written))
		}
	}
	return errors.Join(errs...)
}
