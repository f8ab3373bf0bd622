package bench

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Machine describes the host a run measured.
type Machine struct {
	CPUModel    string `json:"cpu_model"`
	Cores       int    `json:"cores"`
	MemoryBytes int64  `json:"memory_bytes"`
	Kernel      string `json:"kernel"`
	OS          string `json:"os"`
	Arch        string `json:"arch"`
	GoVersion   string `json:"go_version"`
	// GoMaxProcs is the bench process's GOMAXPROCS; the plugin processes
	// it starts inherit its environment, so a GOMAXPROCS set there applies
	// to them too (docs/benchmarks.md). 0 in reports from before it was
	// recorded.
	GoMaxProcs int `json:"go_maxprocs,omitempty"`
	// Date is when the run started, UTC, RFC 3339.
	Date string `json:"date"`
	// LoadAverage is /proc/loadavg's 1-minute figure at the start: the
	// machine may be shared.
	LoadAverage float64 `json:"load_average_1m"`
	// LoadAverageEnd is the same figure at the end of the run.
	LoadAverageEnd float64 `json:"load_average_1m_end,omitempty"`
	// JavaVersion is the Java runtime that ran ZooKeeper, when it did.
	JavaVersion string `json:"java_version,omitempty"`
}

// DescribeMachine reads the host's description from /proc and the Go
// runtime. Facts it cannot read are left empty.
func DescribeMachine(now time.Time) Machine {
	m := Machine{
		Cores:      runtime.NumCPU(),
		OS:         runtime.GOOS,
		Arch:       runtime.GOARCH,
		GoVersion:  runtime.Version(),
		GoMaxProcs: runtime.GOMAXPROCS(0),
		Date:       now.UTC().Format(time.RFC3339),
	}
	if v, ok := procField("/proc/cpuinfo", "model name"); ok {
		m.CPUModel = v
	}
	if v, ok := procField("/proc/meminfo", "MemTotal"); ok {
		m.MemoryBytes = parseKB(v)
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	m.LoadAverage = loadAverage()
	return m
}

// loadAverage returns /proc/loadavg's 1-minute figure, or 0.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// procField returns the value of the first "key: value" line of a /proc
// file whose key is key.
func procField(path, key string) (string, bool) {
	f, err := os.Open(path)
	if err != nil {
		return "", false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

// parseKB parses "123 kB" into bytes; 0 when malformed.
func parseKB(v string) int64 {
	f := strings.Fields(v)
	if len(f) == 0 {
		return 0
	}
	n, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return 0
	}
	if len(f) > 1 && strings.EqualFold(f[1], "kB") {
		n *= 1024
	}
	return n
}

// PeakRSS returns the peak resident set size (VmHWM) of process pid, in
// bytes. Errors: the process is gone or /proc is unreadable.
func PeakRSS(pid int) (int64, error) {
	v, ok := procField(fmt.Sprintf("/proc/%d/status", pid), "VmHWM")
	if !ok {
		return 0, fmt.Errorf("pid %d: no VmHWM in /proc/%d/status (process gone?)", pid, pid)
	}
	return parseKB(v), nil
}

// userHZ is the unit of /proc/<pid>/stat's CPU times (USER_HZ, 100 on
// Linux whatever the kernel's tick).
const userHZ = 100

// ProcessCPU returns the CPU time (user plus system) process pid has used
// so far, from /proc/<pid>/stat (10 ms resolution). Errors: the process is
// gone or /proc is unreadable.
func ProcessCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// the fields are counted after its closing one (state is field 3,
	// utime 14, stime 15).
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+1:])
	if i < 0 || len(f) < 13 {
		return 0, fmt.Errorf("pid %d: /proc/%d/stat has no CPU times", pid, pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("pid %d: /proc/%d/stat: CPU times %q %q", pid, pid, f[11], f[12])
	}
	return time.Duration(utime+stime) * time.Second / userHZ, nil
}
