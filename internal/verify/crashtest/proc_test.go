package crashtest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// proc is one process seen in /proc.
type proc struct {
	PID     int
	PPID    int
	State   byte
	Cmdline string
}

func (p proc) String() string { return fmt.Sprintf("pid %d (%c) %s", p.PID, p.State, p.Cmdline) }

// readProc reads /proc/<pid>/stat; ok is false once the process is gone.
func readProc(pid int) (proc, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return proc{}, false
	}
	// The command name may contain spaces and parentheses: the fields
	// start after its last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return proc{}, false
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 2 {
		return proc{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	p := proc{PID: pid, PPID: ppid, State: f[0][0]}
	if cl, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); err == nil {
		p.Cmdline = strings.TrimSpace(strings.ReplaceAll(string(cl), "\x00", " "))
	}
	return p, true
}

// alive reports whether pid still runs. A zombie has exited: once its
// parent is gone it only waits for init to reap it.
func alive(pid int) (proc, bool) {
	p, ok := readProc(pid)
	return p, ok && p.State != 'Z' && p.State != 'X'
}

// descendants lists every process below root, children before grandchildren.
func descendants(root int) ([]proc, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	children := map[int][]proc{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := readProc(pid); ok {
			children[p.PPID] = append(children[p.PPID], p)
		}
	}
	var out []proc
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
