package awscalls

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/aws/smithy-go/middleware"

	"github.com/onejob/onejob/infra/permissions"
)

// EnvDir names the folder recordings are written to: every local stack
// (`onejob run`, the end-to-end tests) and `make invoke` write their calls
// there when it is set, and `make test` sets it for all its suites.
const EnvDir = "ONEJOB_AWS_CALLS_DIR"

// EnvSource labels the recordings of a process (default: its program name),
// so a report can say which suite made a call.
const EnvSource = "ONEJOB_AWS_CALLS_SOURCE"

// Config configures a Recorder.
type Config struct {
	// Names tells the local deployment's resources apart.
	Names Names
	// Dir receives the recording, one file per Recorder; empty keeps it
	// in memory only.
	Dir string
	// Source labels the recording.
	Source string
}

// FromEnv is the Config the environment asks for: Dir from EnvDir, Source
// from EnvSource or else the program's name.
func FromEnv(getenv func(string) string, names Names) Config {
	src := getenv(EnvSource)
	if src == "" {
		src = filepath.Base(os.Args[0])
	}
	return Config{Names: names, Dir: getenv(EnvDir), Source: src}
}

// Recorder keeps the distinct calls made, and appends each one to its file
// the first time it is seen: a few lines per process however many jobs run,
// and written at once, so a process killed with -9 (the crash drill) has
// recorded what it did.
type Recorder struct {
	names  Names
	source string
	path   string

	mu    sync.Mutex
	seen  map[Call]bool
	calls []Call
	f     *os.File
	err   error
}

// New starts a recording; with a Dir it creates its file there.
func New(cfg Config) (*Recorder, error) {
	r := &Recorder{names: cfg.Names, source: cfg.Source, seen: map[Call]bool{}}
	if cfg.Dir == "" {
		return r, nil
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("awscalls: %w", err)
	}
	f, err := os.CreateTemp(cfg.Dir, fileSafe.ReplaceAllString(cfg.Source, "_")+"-*"+fileExt)
	if err != nil {
		return nil, fmt.Errorf("awscalls: %w", err)
	}
	r.f, r.path = f, f.Name()
	return r, nil
}

const fileExt = ".calls.jsonl"

var fileSafe = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// Path is the recording's file, empty when in memory only.
func (r *Recorder) Path() string { return r.path }

// APIOption tags an SDK client as fn's: appended to a client's
// Options.APIOptions, it records every operation the client is asked for,
// once per call (not per retry), before it is sent.
func (r *Recorder) APIOption(fn string) func(*middleware.Stack) error {
	return func(st *middleware.Stack) error {
		return st.Initialize.Add(middleware.InitializeMiddlewareFunc("onejob.RecordAWSCall",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				r.Add(r.names.CallsOf(fn, middleware.GetServiceID(ctx), middleware.GetOperationName(ctx), in.Parameters)...)
				return next.HandleInitialize(ctx, in)
			}), middleware.After)
	}
}

// Names are how the recorder names calls.
func (r *Recorder) Names() Names { return r.names }

// Add records calls.
func (r *Recorder) Add(calls ...Call) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range calls {
		if r.seen[c] {
			continue
		}
		r.seen[c] = true
		r.calls = append(r.calls, c)
		if r.f != nil && r.err == nil {
			b, err := json.Marshal(toRecord(c, r.source))
			if err == nil {
				_, err = r.f.Write(append(b, '\n'))
			}
			r.err = err
		}
	}
}

// Calls are the distinct calls recorded so far, in the order first made.
func (r *Recorder) Calls() []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// Close ends the recording, reporting a write that failed.
func (r *Recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return nil
	}
	err := errors.Join(r.err, r.f.Close())
	r.f = nil
	if err != nil {
		return fmt.Errorf("awscalls: recording %s: %w", r.path, err)
	}
	return nil
}

// record is one line of a recording.
type record struct {
	Function string `json:"function"`
	Action   string `json:"action"`
	Kind     string `json:"kind"`
	Name     string `json:"name,omitempty"`
	Index    string `json:"index,omitempty"`
	// Attributes: Call.Attributes.
	Attributes string `json:"attributes,omitempty"`
	Source     string `json:"source"`
}

func toRecord(c Call, source string) record {
	return record{Function: c.Function, Action: c.Action, Kind: string(c.Resource.Kind), Name: c.Resource.Name,
		Index: c.Resource.Index, Attributes: c.Attributes, Source: source}
}

// Recorded is one distinct call and the recordings that hold it.
type Recorded struct {
	Call
	Sources []string
}

// ReadDir reads every recording in dir: the distinct calls, sorted, each
// with the sources that made it, and how many recordings there were.
func ReadDir(dir string) ([]Recorded, int, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*"+fileExt))
	if err != nil {
		return nil, 0, err
	}
	sources := map[Call]map[string]bool{}
	for _, path := range files {
		if err := readFile(path, sources); err != nil {
			return nil, 0, err
		}
	}
	out := make([]Recorded, 0, len(sources))
	for c, srcs := range sources {
		out = append(out, Recorded{Call: c, Sources: slices.Sorted(func(yield func(string) bool) {
			for s := range srcs {
				if !yield(s) {
					return
				}
			}
		})})
	}
	slices.SortFunc(out, func(a, b Recorded) int { return strings.Compare(a.String(), b.String()) })
	return out, len(files), nil
}

func readFile(path string, into map[Call]map[string]bool) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	lines := strings.Split(string(b), "\n")
	for i, line := range lines {
		if line == "" {
			continue
		}
		var rec record
		if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.Function == "" || rec.Action == "" || rec.Kind == "" {
			if i == len(lines)-1 {
				continue // unterminated: a process killed mid-write
			}
			return fmt.Errorf("%s:%d: not a recorded call: %.200s", path, i+1, line)
		}
		c := Call{Function: rec.Function, Action: rec.Action,
			Resource: permissions.Resource{Kind: permissions.Kind(rec.Kind), Name: rec.Name, Index: rec.Index}, Attributes: rec.Attributes}
		if into[c] == nil {
			into[c] = map[string]bool{}
		}
		into[c][rec.Source] = true
	}
	return nil
}
