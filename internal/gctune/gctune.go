// Package gctune bounds a long-lived process's garbage-collector headroom
// in bytes instead of in proportion to its live heap.
//
// Go's collector lets the heap grow by GOGC percent of the live heap
// before it collects again (100: the heap doubles). For a coordinator the
// live heap is mostly its metadata image, which lives as long as the
// process: doubling it buys few collections and costs as much memory
// again as the tree itself. The tuner sets GOGC after every collection so
// that the heap may grow by Headroom bytes above the live heap (never by
// more than Go's default, the live heap itself, and never by less than
// MinPercent of it): a small process keeps Go's default, a large one
// collects once it has allocated Headroom bytes.
//
// GOGC is set again only when the live heap has moved by more than an
// eighth since it was last derived, so that it does not flip between
// neighbouring values from one collection to the next.
//
// The tuner learns of each collection from a finalizer on an object it
// re-arms every cycle, and reads the live heap the collection marked
// (runtime/metrics /gc/heap/live:bytes).
package gctune

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// DefaultMinPercent is the lowest GOGC the tuner sets: a live heap ten
// times the headroom still grows by a tenth of itself between
// collections, so that collections stay rarer than allocations.
const DefaultMinPercent = 10

// Options configure a tuner.
type Options struct {
	// Headroom is how many bytes the heap may grow above its live size
	// before the next collection. Zero or less: no tuner (Go's default).
	Headroom int64
	// MinPercent is the lowest GOGC set; default DefaultMinPercent, at
	// most 100.
	MinPercent int
	// OnSet, when set, is called with each GOGC value the tuner sets and
	// the live heap it was derived from.
	OnSet func(percent int, live uint64)
}

// Percent is the GOGC value for a live heap of live bytes: headroom as a
// percentage of live, within [minPercent, 100].
func Percent(live uint64, headroom int64, minPercent int) int {
	if minPercent <= 0 {
		minPercent = DefaultMinPercent
	}
	if minPercent > 100 {
		minPercent = 100
	}
	if live == 0 || headroom <= 0 || uint64(headroom) >= live {
		return 100
	}
	p := int(uint64(headroom) * 100 / live)
	if p < minPercent {
		p = minPercent
	}
	return p
}

// Overridden names the environment variable that makes the tuner stand
// aside (GOGC or GOMEMLIMIT, Go's own controls: whoever set them chose the
// collector's behaviour), or "" when neither is set. getenv is os.Getenv
// in a process.
func Overridden(getenv func(string) string) string {
	for _, k := range []string{"GOGC", "GOMEMLIMIT"} {
		if getenv(k) != "" {
			return k
		}
	}
	return ""
}

// policy decides, after each collection, whether and to what GOGC is
// set.
type policy struct {
	headroom   int64
	minPercent int
	// base is the live heap GOGC was last derived from (0: none yet).
	base uint64
	last int // the GOGC last set (-1: none)
}

// next returns the GOGC for a collection that left live bytes live, and
// whether to set it. A live heap within an eighth of the one GOGC was
// last derived from leaves GOGC as it is: live heaps a little apart
// would otherwise flip GOGC between neighbouring values on every
// collection, and a lower value can start a collection at once, which
// finds the heap a little different again.
func (pol *policy) next(live uint64) (int, bool) {
	if pol.base > 0 && live > pol.base-pol.base/8 && live < pol.base+pol.base/8 {
		return pol.last, false
	}
	pol.base = live
	p := Percent(live, pol.headroom, pol.minPercent)
	if p == pol.last {
		return p, false
	}
	pol.last = p
	return p, true
}

// Tuner adjusts GOGC after each collection until Stop.
type Tuner struct {
	opts   Options
	kick   chan struct{}
	stop   chan struct{} // closed by Stop
	done   chan struct{}
	once   sync.Once
	before int
}

// sentinel is the object whose finalizer runs once per collection. It
// holds a pointer, so it is never batched with other small objects (the
// tiny allocator takes pointer-free ones only), which would delay its
// finalizer.
type sentinel struct{ t *Tuner }

// Start starts a tuner (nil when opts.Headroom is zero or less). It sets
// GOGC from the current live heap at once, then after every collection.
func Start(opts Options) *Tuner {
	if opts.Headroom <= 0 {
		return nil
	}
	t := &Tuner{opts: opts, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	// runtime/debug has no getter: set and put back (runtime/metrics
	// reports GOGC=off as 0, which would not restore it).
	t.before = debug.SetGCPercent(100)
	debug.SetGCPercent(t.before)
	t.arm()
	go t.loop()
	t.kick <- struct{}{}
	return t
}

func (t *Tuner) arm() {
	s := &sentinel{t: t}
	runtime.SetFinalizer(s, func(s *sentinel) {
		select {
		case <-s.t.stop:
			return // not re-armed
		default:
		}
		select {
		case s.t.kick <- struct{}{}:
		default:
		}
		s.t.arm()
	})
}

func (t *Tuner) loop() {
	defer close(t.done)
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	pol := policy{headroom: t.opts.Headroom, minPercent: t.opts.MinPercent, last: -1}
	for {
		select {
		case <-t.stop:
			return
		case <-t.kick:
		}
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 {
			continue
		}
		live := sample[0].Value.Uint64()
		p, set := pol.next(live)
		if !set {
			continue
		}
		debug.SetGCPercent(p)
		if t.opts.OnSet != nil {
			t.opts.OnSet(p, live)
		}
	}
}

// Stop ends the tuner and restores the GOGC in force when it started.
// Safe on a nil Tuner and more than once.
func (t *Tuner) Stop() {
	if t == nil {
		return
	}
	t.once.Do(func() {
		close(t.stop)
		<-t.done
		debug.SetGCPercent(t.before)
	})
}
