package gctune

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live     uint64
		headroom int64
		min      int
		want     int
	}{
		{0, 64 * mib, 0, 100},            // nothing live yet: Go's default
		{32 * mib, 64 * mib, 0, 100},     // headroom above the live heap: never more than the default
		{256 * mib, 64 * mib, 0, 25},     // a quarter
		{640 * mib, 64 * mib, 0, 10},     // a tenth
		{6400 * mib, 64 * mib, 0, 10},    // the floor
		{6400 * mib, 64 * mib, 5, 5},     // a lower floor
		{6400 * mib, 64 * mib, 500, 100}, // a floor above 100 is 100
		{256 * mib, 0, 0, 100},           // no headroom: the default
	} {
		if got := Percent(c.live, c.headroom, c.min); got != c.want {
			t.Errorf("Percent(%d MiB, %d MiB, %d) = %d, want %d", c.live/mib, c.headroom/mib, c.min, got, c.want)
		}
	}
}

func TestOverridden(t *testing.T) {
	env := map[string]string{}
	get := func(k string) string { return env[k] }
	if got := Overridden(get); got != "" {
		t.Errorf("no variable set: %q", got)
	}
	env["GOMEMLIMIT"] = "1GiB"
	if got := Overridden(get); got != "GOMEMLIMIT" {
		t.Errorf("GOMEMLIMIT set: %q", got)
	}
	env["GOGC"] = "50"
	if got := Overridden(get); got != "GOGC" {
		t.Errorf("GOGC set: %q", got)
	}
}

func gogc() int64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// waitGOGC collects until the tuner has set GOGC to a value cond accepts
// (at most 50 collections) and returns the last value seen.
func waitGOGC(t *testing.T, what string, cond func(int64) bool) int64 {
	t.Helper()
	var v int64
	for i := 0; i < 50; i++ {
		runtime.GC()
		runtime.Gosched()
		if v = gogc(); cond(v) {
			return v
		}
	}
	t.Fatalf("%s: GOGC is %d after 50 collections", what, v)
	return v
}

// TestTunerFollowsTheLiveHeap runs a tuner in this process: a live heap
// many times the headroom brings GOGC down to the headroom's share of it,
// dropping it brings GOGC back to the default, and Stop restores what was
// set before.
func TestTunerFollowsTheLiveHeap(t *testing.T) {
	old := debug.SetGCPercent(80)
	defer debug.SetGCPercent(old)
	var sets []int
	setc := make(chan int, 1000)
	tu := Start(Options{Headroom: 8 << 20, OnSet: func(p int, _ uint64) { setc <- p }})
	if tu == nil {
		t.Fatal("Start returned no tuner for a positive headroom")
	}
	defer tu.Stop()

	live := make([][]byte, 0, 64)
	for i := 0; i < 64; i++ { // 64 MiB, eight times the headroom
		b := make([]byte, 1<<20)
		b[0] = byte(i)
		live = append(live, b)
	}
	// 8 MiB over a live heap of 64 MiB and what the test binary holds:
	// at most 12.5, or 14 when derived from a live heap an eighth lower
	// (a collection during the allocation; the tuner keeps GOGC while
	// the live heap stays within an eighth). Collections made while the
	// heap grew may have set higher values first.
	v := waitGOGC(t, "64 MiB live", func(v int64) bool { return v <= 14 })
	if v < DefaultMinPercent {
		t.Errorf("GOGC with 64 MiB live and 8 MiB of headroom: %d, below the floor of %d", v, DefaultMinPercent)
	}
	runtime.KeepAlive(live)
	live = nil
	waitGOGC(t, "the 64 MiB dropped", func(v int64) bool { return v == 100 })

	tu.Stop()
	tu.Stop() // twice is fine
	if v := gogc(); v != 80 {
		t.Errorf("Stop left GOGC at %d, want the 80 set before Start", v)
	}
	debug.SetGCPercent(37)
	runtime.GC()
	runtime.GC()
	if v := gogc(); v != 37 {
		t.Errorf("after Stop the tuner still sets GOGC: %d, want 37", v)
	}
	close(setc)
	for p := range setc {
		sets = append(sets, p)
	}
	if len(sets) < 2 {
		t.Errorf("OnSet saw %v, want a low value and 100 again", sets)
	}
}

func TestStartWithoutHeadroom(t *testing.T) {
	if tu := Start(Options{}); tu != nil {
		t.Error("Start with no headroom returned a tuner")
	}
	var tu *Tuner
	tu.Stop() // a nil tuner stops
}

// TestPolicySteady: a live heap within an eighth of the one GOGC was
// derived from leaves GOGC alone; past it, GOGC follows.
func TestPolicySteady(t *testing.T) {
	const mib = 1 << 20
	pol := policy{headroom: 64 * mib, last: -1}
	for i, c := range []struct {
		live mib64
		want int
		set  bool
	}{
		{400, 16, true},  // 64/400
		{390, 16, false}, // 17 by itself, within an eighth: left alone
		{420, 16, false},
		{340, 18, true}, // more than an eighth below 400: 64/340
		{370, 18, false},
		{800, 10, true},  // 64/800 is 8: the floor
		{700, 10, false}, // a new base (an eighth below 800), the same GOGC: nothing to set
		{640, 10, false},
		{32, 100, true},
	} {
		p, set := pol.next(uint64(c.live) * mib)
		if p != c.want || set != c.set {
			t.Errorf("step %d, %d MiB live: GOGC %d, set %v; want %d, %v", i, c.live, p, set, c.want, c.set)
		}
	}
}

type mib64 uint64
