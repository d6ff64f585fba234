package testenv

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
)

// Proc is one process as /proc shows it (Linux only).
type Proc struct {
	PID     int
	PPID    int
	State   byte
	Cmdline string
}

func (p Proc) String() string { return fmt.Sprintf("pid %d (%c) %s", p.PID, p.State, p.Cmdline) }

// ReadProc reads /proc/<pid>/stat; ok is false once the process is gone.
func ReadProc(pid int) (Proc, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Proc{}, false
	}
	// The command name may contain spaces and parentheses: the fields
	// start after its last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return Proc{}, false
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 2 {
		return Proc{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	p := Proc{PID: pid, PPID: ppid, State: f[0][0]}
	if cl, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); err == nil {
		p.Cmdline = strings.TrimSpace(strings.ReplaceAll(string(cl), "\x00", " "))
	}
	return p, true
}

// Alive reports whether pid still runs. A zombie has exited: once its
// parent is gone it only waits for init to reap it.
func Alive(pid int) (Proc, bool) {
	p, ok := ReadProc(pid)
	return p, ok && p.State != 'Z' && p.State != 'X'
}

// Descendants lists every process below root, children before grandchildren.
func Descendants(root int) ([]Proc, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	children := map[int][]Proc{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := ReadProc(pid); ok {
			children[p.PPID] = append(children[p.PPID], p)
		}
	}
	var out []Proc
	queue := []int{root}
	for len(queue) > 0 {
		next := queue[0]
		queue = queue[1:]
		for _, c := range children[next] {
			out = append(out, c)
			queue = append(queue, c.PID)
		}
	}
	return out, nil
}

// OpenFDs counts the entries of /proc/<pid>/fd: every open file, pipe and
// socket of the process.
func OpenFDs(pid int) (int, error) {
	entries, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		return 0, err
	}
	return len(entries), nil
}

// RSSKiB is the process's resident set size (VmRSS in /proc/<pid>/status).
func RSSKiB(pid int) (int64, error) { return StatusKiB(pid, "VmRSS") }

// StatusKiB is a size field of /proc/<pid>/status in KiB, such as VmRSS or
// its file-backed part, RssFile (mapped files' pages: the page cache, which
// the kernel may drop at any time).
func StatusKiB(pid int, field string) (int64, error) {
	v, err := statusField(pid, field)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSuffix(v, " kB"), 10, 64)
}

// NoFileLimit is the process's soft and hard limit on open files (the
// "Max open files" line of /proc/<pid>/limits, what `ulimit -n` sets).
func NoFileLimit(pid int) (soft, hard int, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/limits")
	if err != nil {
		return 0, 0, err
	}
	for line := range bytes.Lines(b) {
		rest, ok := bytes.CutPrefix(line, []byte("Max open files"))
		if !ok {
			continue
		}
		f := strings.Fields(string(rest))
		if len(f) < 2 {
			break
		}
		if soft, err = strconv.Atoi(f[0]); err != nil {
			return 0, 0, fmt.Errorf("limits of %d: %q", pid, line)
		}
		if hard, err = strconv.Atoi(f[1]); err != nil {
			return 0, 0, fmt.Errorf("limits of %d: %q", pid, line)
		}
		return soft, hard, nil
	}
	return 0, 0, fmt.Errorf("limits of %d: no Max open files line", pid)
}

func statusField(pid int, name string) (string, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+":"); ok {
			return strings.TrimSpace(v), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("/proc/%d/status: no %s", pid, name)
}

// FDTargets lists what the process's open descriptors point to, as
// readlink /proc/<pid>/fd/N shows it ("socket:[123]", "pipe:[4]", a path).
func FDTargets(pid int) ([]string, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		if target, err := os.Readlink(dir + "/" + e.Name()); err == nil {
			out = append(out, target)
		}
	}
	return out, nil
}

// TCPSocket is one TCP socket of a network namespace.
type TCPSocket struct {
	LocalPort, RemotePort int
	// State is the kernel's state code: "01" established, "0A" listening.
	State string
}

// Established and Listening name the two states that matter here.
func (s TCPSocket) Established() bool { return s.State == "01" }
func (s TCPSocket) Listening() bool   { return s.State == "0A" }

// TCPSockets lists the TCP sockets of pid's network namespace by the
// FDTargets form of their inode ("socket:[123]"), so a process's own
// sockets are those among its FDTargets.
func TCPSockets(pid int) (map[string]TCPSocket, error) {
	out := map[string]TCPSocket{}
	for _, file := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/net/" + file)
		if err != nil {
			return nil, err
		}
		first := true
		for line := range bytes.Lines(b) {
			if first { // header
				first = false
				continue
			}
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			f := strings.Fields(string(line))
			if len(f) < 10 {
				continue
			}
			out["socket:["+f[9]+"]"] = TCPSocket{LocalPort: hexPort(f[1]), RemotePort: hexPort(f[2]), State: f[3]}
		}
	}
	return out, nil
}

// Connections counts pid's established TCP connections whose remote end
// is port (dialled to a server on port).
func Connections(pid, port int) (int, error) {
	targets, err := FDTargets(pid)
	if err != nil {
		return 0, err
	}
	socks, err := TCPSockets(pid)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, t := range targets {
		if s, ok := socks[t]; ok && s.Established() && s.RemotePort == port {
			n++
		}
	}
	return n, nil
}

func hexPort(addr string) int {
	_, p, ok := strings.Cut(addr, ":")
	if !ok {
		return 0
	}
	n, _ := strconv.ParseUint(p, 16, 16)
	return int(n)
}

// NodeMemory is what a node server reports after a full collection.
type NodeMemory struct {
	RSSBytes      int64 `json:"rss_bytes"`
	HeapUsedBytes int64 `json:"heap_used_bytes"`
}

// CollectGarbage asks a local node server (dynalite, the Step Functions
// server) for a full collection, POST endpoint/control/gc (why:
// internal/dev/nodegc/gc.cjs), and returns its memory afterwards. The
// request has a connection of its own, closed afterwards, so descriptor
// counts taken next do not see it.
func CollectGarbage(ctx context.Context, endpoint string) (NodeMemory, error) {
	var mem NodeMemory
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint+"/control/gc", nil)
	if err != nil {
		return mem, err
	}
	req.Close = true
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return mem, fmt.Errorf("collect garbage at %s: %w", endpoint, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return mem, fmt.Errorf("collect garbage at %s: %w", endpoint, err)
	}
	if resp.StatusCode != http.StatusOK {
		return mem, fmt.Errorf("collect garbage at %s: %d %s", endpoint, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, &mem); err != nil || mem.RSSBytes <= 0 {
		return mem, fmt.Errorf("collect garbage at %s: unexpected answer %q", endpoint, body)
	}
	return mem, nil
}
