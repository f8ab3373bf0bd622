package bench

import (
	"context"
	"fmt"
	"time"
)

// Settling between batches. A backend's batch can leave work behind that
// goes on after its last call returned: on ZooKeeper, the coordinator's
// image re-reads and re-watches every node a batch of DDL created (the
// ensemble has no persistent watches through go-zookeeper), which keeps
// the three servers and the plugin busy for seconds after a createTable
// batch. Interleaving alone would bill that work to whichever backend runs
// next. So before a backend's batch the run waits until the processes of
// every other backend's system have gone quiet: under settleRule.cores of
// CPU over one window, at most settleRule.limit (--no-settle turns it off).
// A batch that starts with the others still busy is counted (Unsettled) and
// reported, not hidden.

// settleRule is when the other systems count as quiet.
type settleRule struct {
	// cores is the most CPU, in cores, the other systems' processes may
	// use over one window and count as quiet. Their idle use is under
	// it (three idle Raft voters used 0.05 to 0.11 cores, three idle
	// ZooKeeper servers and their plugin 0.01 to 0.02).
	cores float64
	// window is the span one reading covers (the CPU times read from
	// /proc have a 10 ms resolution).
	window time.Duration
	// limit bounds the wait.
	limit time.Duration
}

// defaultSettle is the rule `metaplane bench` uses.
var defaultSettle = settleRule{cores: 0.15, window: 400 * time.Millisecond, limit: 15 * time.Second}

// settle waits until the processes of systems used at most rule.cores over
// one window, or until rule.limit or ctx ends. It returns how long it
// waited and whether they went quiet. Systems without processes (in-process
// test doubles) are quiet at once; a process that cannot be read (it
// exited) is left out.
func settle(ctx context.Context, systems []*System, rule settleRule) (time.Duration, bool) {
	pids := systemPIDs(systems...)
	if len(pids) == 0 {
		return 0, true
	}
	start := time.Now()
	prev := pidsCPU(pids)
	t := time.NewTimer(rule.window)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return time.Since(start), false
		case <-t.C:
		}
		cur := pidsCPU(pids)
		if float64(cur-prev) <= rule.cores*float64(rule.window) {
			return time.Since(start), true
		}
		if time.Since(start) >= rule.limit {
			return time.Since(start), false
		}
		prev = cur
		t.Reset(rule.window)
	}
}

// pidsCPU is the CPU time used so far by the processes that can be read.
func pidsCPU(pids []int) time.Duration {
	var total time.Duration
	for _, pid := range pids {
		if d, err := ProcessCPU(pid); err == nil {
			total += d
		}
	}
	return total
}

// othersThan lists the started systems other than name.
func othersThan(systems map[string]*System, order []string, name string) []*System {
	var out []*System
	for _, n := range order {
		if s := systems[n]; s != nil && n != name {
			out = append(out, s)
		}
	}
	return out
}

// SettleSummary is what settling cost a run: see settle.go.
type SettleSummary struct {
	// Cores, WindowMillis and LimitSeconds are the rule: quiet is at most
	// Cores of CPU over one window, waited for at most the limit.
	Cores        float64 `json:"cores"`
	WindowMillis float64 `json:"window_ms"`
	LimitSeconds float64 `json:"limit_s"`
	// Batches is the number of batches that waited; WaitedSeconds their
	// waits together; Unsettled the batches that started with another
	// system still busy after the limit.
	Batches       int     `json:"batches"`
	WaitedSeconds float64 `json:"waited_s"`
	Unsettled     int     `json:"unsettled"`
}

func newSettleSummary(rule settleRule) *SettleSummary {
	return &SettleSummary{Cores: rule.cores, WindowMillis: float64(rule.window.Milliseconds()), LimitSeconds: rule.limit.Seconds()}
}

func (s *SettleSummary) add(waited time.Duration, quiet bool) {
	s.Batches++
	s.WaitedSeconds = round3(s.WaitedSeconds + waited.Seconds())
	if !quiet {
		s.Unsettled++
	}
}

// String is the summary's line in the report.
func (s *SettleSummary) String() string {
	line := fmt.Sprintf("before each batch the other backends' processes went quiet (at most %.2f cores over %.0f ms, waited at most %.0f s): %d batches waited %.1f s in all",
		s.Cores, s.WindowMillis, s.LimitSeconds, s.Batches, s.WaitedSeconds)
	if s.Unsettled > 0 {
		line += fmt.Sprintf("; %d started with another backend still busy", s.Unsettled)
	}
	return line
}
