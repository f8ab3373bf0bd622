// Package procstat reads what Linux's /proc says of a process: its CPU
// time and its children.
package procstat

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of /proc/<pid>/stat's utime and stime.
const userHZ = 100

// fields returns the fields of /proc/<pid>/stat after the command name
// (state first), or nil.
func fields(pid string) []string {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// CPU returns the CPU time pid used so far (utime + stime), 0 when it
// cannot be read.
func CPU(pid int) time.Duration {
	f := fields(strconv.Itoa(pid))
	// state(0) ppid(1) ... utime(11) stime(12)
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * time.Second / userHZ
}

// Children returns the pids whose parent is pid.
func Children(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	want := strconv.Itoa(pid)
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := fields(e.Name()); len(f) > 1 && f[1] == want {
			out = append(out, p)
		}
	}
	return out
}
