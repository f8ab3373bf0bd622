package raft

import (
	"flag"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

var (
	electionTicksFlag  = flag.String("raft.election-ticks", "50ms,10ms", "BenchmarkElectionTick: the Raft ticks compared, comma-separated")
	electionVotersFlag = flag.String("raft.election-voters", "3", "BenchmarkElectionTick: the cluster sizes, comma-separated")
	electionDelayFlag  = flag.Duration("raft.election-delay", 0, "BenchmarkElectionTick: a delay added to every message between the members (loopback proxies)")
	electionWatchFlag  = flag.String("raft.election-watch", "on", "BenchmarkElectionTick: the leader watch (failover.go) on, off, or both compared (on,off)")
)

// BenchmarkElectionTick measures how the Raft tick changes the elections
// after a leader stops, at the default timeouts (election 1s, heartbeat
// 500ms lowered to 100ms): one cluster per tick of -raft.election-ticks
// (real NodeHosts, tiny LogDB, loopback), all running at once. Each
// iteration stops the leader's NodeHost on every cluster in turn (so that
// the machine's load falls on every tick alike), times until a survivor
// reports a new leader, records the new term minus the stopped leader's
// (1: one vote round; more: split votes), then restarts the stopped member
// and waits until every member follows the same leader in the same term
// at the same applied index. Run, e.g.:
//
//	go test ./backends/raft -run '^$' -bench ElectionTick -benchtime 50x
//
// With -raft.election-delay every message between the members crosses a
// loopback proxy that holds it that long (as a loaded machine delays the
// voters' processes): split votes need two survivors timing out within
// about a message delay of each other, which on a quiet loopback is rare.
//
// It reports per tick the share of elections that took more than one term
// (split%) and the time to a new leader (p50, p99, max), and logs the term
// steps. The stop is a graceful NodeHost close, timed from its start.
// -raft.election-watch on,off runs each tick with and without the leader
// watch (failover.go) side by side.
func BenchmarkElectionTick(b *testing.B) {
	var ticks []time.Duration
	for _, s := range strings.Split(*electionTicksFlag, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			b.Fatalf("-raft.election-ticks %q: %v", s, err)
		}
		ticks = append(ticks, d)
	}
	for _, s := range strings.Split(*electionVotersFlag, ",") {
		var n int
		if _, err := fmt.Sscan(strings.TrimSpace(s), &n); err != nil || n < 3 {
			b.Fatalf("-raft.election-voters %q: want a number of at least 3", s)
		}
		var watch []bool
		for _, s := range strings.Split(*electionWatchFlag, ",") {
			switch strings.TrimSpace(s) {
			case "on":
				watch = append(watch, true)
			case "off":
				watch = append(watch, false)
			default:
				b.Fatalf("-raft.election-watch %q: want on, off or on,off", s)
			}
		}
		b.Run(fmt.Sprintf("voters=%d", n), func(b *testing.B) { benchElectionTicks(b, n, ticks, watch) })
	}
}

// electionRun is one tick's cluster and its measured elections.
type electionRun struct {
	tick  time.Duration
	watch bool
	c     *cluster
	took  []time.Duration
	steps map[uint64]int
}

func benchElectionTicks(b *testing.B, voters int, ticks []time.Duration, watch []bool) {
	var runs []*electionRun
	for _, tick := range ticks {
		for _, w := range watch {
			runs = append(runs, &electionRun{tick: tick, watch: w, steps: map[uint64]int{}})
		}
	}
	for _, r := range runs {
		defaults := func(_ int, o *Options) {
			o.tick, o.noFastFailover = r.tick, !r.watch
			o.Heartbeat, o.ElectionTimeout = 500*time.Millisecond, time.Second
		}
		if *electionDelayFlag > 0 {
			r.c, _ = startProxied(b, voters, *electionDelayFlag, defaults)
		} else {
			r.c = launchCluster(b, newVoters(b, voters), defaults)
		}
		r.c.settle()
	}
	for b.Loop() {
		for _, r := range runs {
			took, step := r.c.stopLeader()
			r.took = append(r.took, took)
			r.steps[step]++
			if took > time.Second {
				b.Logf("voters=%d %s: an election took %v, %d term(s)", voters, r.name(), took, step)
			}
		}
	}
	b.StopTimer()
	for _, r := range runs {
		slices.Sort(r.took)
		split := 0
		for step, n := range r.steps {
			if step > 1 {
				split += n
			}
		}
		name := r.name()
		b.ReportMetric(100*float64(split)/float64(len(r.took)), "split%/"+name)
		b.ReportMetric(ms(nearestRank(r.took, 50)), "p50-ms/"+name)
		b.ReportMetric(ms(nearestRank(r.took, 99)), "p99-ms/"+name)
		b.ReportMetric(ms(r.took[len(r.took)-1]), "max-ms/"+name)
		b.Logf("voters=%d %s delay=%s: %d elections, term steps %v, p50 %v p90 %v p99 %v max %v",
			voters, name, *electionDelayFlag, len(r.took), r.steps, nearestRank(r.took, 50), nearestRank(r.took, 90),
			nearestRank(r.took, 99), r.took[len(r.took)-1])
	}
}

// name names r's tick and watch in the benchmark's metrics.
func (r *electionRun) name() string {
	w := "off"
	if r.watch {
		w = "on"
	}
	return "tick=" + strings.TrimSuffix(r.tick.String(), "0s") + "/watch=" + w
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// nearestRank is the nearest-rank p-th percentile of sorted (as
// bench.Percentile).
func nearestRank(sorted []time.Duration, p float64) time.Duration {
	rank := max(int(math.Ceil(p/100*float64(len(sorted)))), 1)
	return sorted[rank-1]
}

// raftView is what a member knows of the Raft leadership, and the channel
// closed at its next change.
type raftView struct {
	leader, term, applied uint64
	changed               <-chan struct{}
}

func (c *cluster) view(i int) raftView {
	m := c.members[i].m
	m.mu.Lock()
	defer m.mu.Unlock()
	return raftView{leader: m.raftLeader, term: m.raftTerm, applied: m.applied, changed: m.changeC}
}

// waitViews waits until ok holds of the views of the running members (at
// most 30s: the benchmark fails), waking at every leadership change and
// at least every 10ms (an applied index moves without one).
func (c *cluster) waitViews(what string, ok func(map[int]raftView) bool) {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		views := map[int]raftView{}
		cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(time.After(10 * time.Millisecond))}}
		for i, p := range c.members {
			if p != nil {
				views[i] = c.view(i)
				cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(views[i].changed)})
			}
		}
		if ok(views) {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out after 30s waiting for %s: %+v", what, views)
		}
		reflect.Select(cases)
	}
}

// settle waits until every running member follows one leader in one term
// at the same applied index.
func (c *cluster) settle() {
	c.t.Helper()
	c.waitViews("every member to follow one leader at one applied index", func(views map[int]raftView) bool {
		var first *raftView
		for _, v := range views {
			if v.leader == 0 || (first != nil && (v.leader != first.leader || v.term != first.term || v.applied != first.applied)) {
				return false
			}
			first = &v
		}
		return first != nil
	})
}

// stopLeader stops the leader's NodeHost, waits for a survivor to report a
// new leader, restarts the stopped member and waits for the cluster to
// settle. It returns the time from the stop to the new leader and the
// number of terms the election took.
func (c *cluster) stopLeader() (time.Duration, uint64) {
	c.t.Helper()
	l := c.leader()
	if l < 0 {
		c.t.Fatal("no leader before the stop")
	}
	old := c.view(l)
	start := time.Now()
	c.stop(l)
	if closed := time.Since(start); closed > 100*time.Millisecond {
		c.t.Logf("the stop of member %d took %v", l+1, closed)
	}
	var took time.Duration
	var term uint64
	c.waitViews("a new leader", func(views map[int]raftView) bool {
		for _, v := range views {
			if v.leader != 0 && v.leader != old.leader && v.term > old.term {
				took, term = time.Since(start), v.term
				return true
			}
		}
		return false
	})
	if err := c.start(l); err != nil {
		c.t.Fatalf("restart member %d: %v", l+1, err)
	}
	c.settle()
	return took, term - old.term
}
