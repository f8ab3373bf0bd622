package conformance

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metaplane/metaplane/core"
)

// Capability names a Property may need. The first group are
// core.Capabilities fields declared by the backend; HarnessCompactor is a
// feature of the harness's Store (see Compactor).
const (
	NeedsExactHistory   = "ExactHistory"
	NeedsStaleReads     = "StaleReads"
	NeedsLeases         = "Leases"
	NeedsFaultInjection = "FaultInjection"
	NeedsNativeIDs      = "NativeIDAllocation"
	NeedsImport         = "Import"
	NeedsCompactor      = "Compactor"
)

// PropertyTimeout bounds one property: its context ends after it, and
// RunStandalone reports a property still running after it as failed.
const PropertyTimeout = 60 * time.Second

// waitTimeout bounds every wait for something another client, a session's
// end or a watch must bring about: generous, for replicated backends on
// slow machines.
const waitTimeout = 20 * time.Second

// Property is one named property of the contract.
type Property struct {
	// Name is the property's name, e.g. "Create/Sequential/TenDigitSuffix";
	// under Run it is the subtest's name.
	Name string
	// Needs is the capability the property needs ("" for none): one of the
	// Needs* constants, or several joined with "+". Without it the property
	// is skipped with a message naming it.
	Needs string
	// Description says in one line what the property checks.
	Description string

	run func(e *env)
}

// Compactor is implemented by a harness's Store whose backend can drop
// change history on demand (the memory backend's Store.Compact). The
// properties that need a compacted history are skipped without it.
type Compactor interface {
	// Compact drops the change history up to and including revision, so
	// that a watch from it fails with core.ErrCompacted.
	Compact(t T, revision int64)
}

// Properties returns the suite's properties in the order they run. The
// slice belongs to the caller.
func Properties() []Property {
	var ps []Property
	for _, group := range [][]Property{
		pathProperties(), createProperties(), readProperties(), writeProperties(),
		txnProperties(), sessionProperties(), watchProperties(), snapshotProperties(),
		electionProperties(), idProperties(), leaseProperties(), importProperties(), contextProperties(),
		closedProperties(), faultProperties(), statusProperties(),
	} {
		ps = append(ps, group...)
	}
	return ps
}

// Run runs every property against the harness's backend, each as a subtest
// of t named after the property, each on a fresh store from h.NewStore.
// Properties needing a capability the backend does not declare are skipped
// with a message naming it. Call it from a Go test:
//
//	func TestConformance(t *testing.T) { conformance.Run(t, myHarness) }
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.NewStore == nil {
		t.Fatalf("conformance: Harness %q has no NewStore", h.Name)
	}
	for _, p := range Properties() {
		t.Run(p.Name, func(t *testing.T) {
			t.Helper()
			runProperty(t, h, p, PropertyTimeout)
		})
	}
}

// runProperty sets up a fresh store and runs one property on t; the
// property's context ends after timeout.
func runProperty(t T, h Harness, p Property, timeout time.Duration) {
	t.Helper()
	store := h.NewStore(t)
	if store == nil {
		t.Fatalf("conformance: harness %q returned a nil store", h.Name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	e := &env{t: t, store: store, ctx: ctx, h: h}
	e.c0 = e.client()
	e.caps = e.c0.Capabilities()
	if p.Needs != "" {
		for _, need := range strings.Split(p.Needs, "+") {
			if ok, why := e.has(need); !ok {
				t.Skipf("%s", why)
			}
		}
	}
	if _, _, err := core.Create(ctx, e.c0, base, nil, core.CreateOptions{}); err != nil {
		t.Fatalf("setup: create %s: %v", base, err)
	}
	p.run(e)
}

// has reports whether the backend (or harness) has capability name, and
// otherwise the skip message.
func (e *env) has(name string) (bool, string) {
	var ok bool
	switch name {
	case NeedsExactHistory:
		ok = e.caps.ExactHistory
	case NeedsStaleReads:
		ok = e.caps.StaleReads
	case NeedsLeases:
		_, impl := core.Optional[core.LeaseManager](e.c0)
		ok = e.caps.Leases && impl
	case NeedsFaultInjection:
		_, impl := core.Optional[core.FaultInjector](e.c0)
		ok = e.caps.FaultInjection && impl
	case NeedsImport:
		_, impl := core.Optional[core.Importer](e.c0)
		ok = e.caps.Import && impl
	case NeedsNativeIDs:
		_, impl := core.Optional[core.IDAllocator](e.c0)
		ok = e.caps.NativeIDAllocation && impl
	case NeedsCompactor:
		_, ok = e.store.(Compactor)
		if !ok {
			return false, fmt.Sprintf("harness %q does not implement conformance.Compactor", e.h.Name)
		}
		return true, ""
	default:
		return false, fmt.Sprintf("unknown capability %q", name)
	}
	if !ok {
		return false, fmt.Sprintf("backend %q does not declare %s", e.caps.Name, name)
	}
	return true, ""
}

// Status is the outcome of one property in RunStandalone.
type Status string

// The outcomes of a property.
const (
	Passed  Status = "passed"
	Failed  Status = "failed"
	Skipped Status = "skipped"
)

// Result is one property's outcome in RunStandalone.
type Result struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	// Duration is how long the property ran, cleanups included.
	Duration time.Duration `json:"duration_ns"`
	// Messages are the property's log, error, fatal and skip messages, in
	// order.
	Messages []string `json:"messages,omitempty"`
}

// StandaloneOptions are the options of RunStandalone.
type StandaloneOptions struct {
	// Run, when not empty, is a regular expression; only properties whose
	// name it matches (anywhere, as regexp.MatchString does) run.
	Run string
	// Timeout bounds each property (0: PropertyTimeout): its context ends
	// then, and a property still running is reported as failed and
	// abandoned (its cleanups run when it returns).
	Timeout time.Duration
	// OnStart and OnResult, when set, are called before and after each
	// property, for progress output.
	OnStart  func(name string)
	OnResult func(Result)
}

// RunStandalone runs the suite without `go test` (the `metaplane
// conformance` command): each selected property on a fresh store, one after
// the other, each in its own goroutine with its own T, so that Fatalf ends
// only that property. A panic in a property is a failure. It returns one
// Result per selected property, in order. Errors: a Run expression that
// does not compile.
func RunStandalone(h Harness, opts StandaloneOptions) ([]Result, error) {
	var re *regexp.Regexp
	if opts.Run != "" {
		var err error
		if re, err = regexp.Compile(opts.Run); err != nil {
			return nil, fmt.Errorf("conformance: bad --run expression %q: %w", opts.Run, err)
		}
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = PropertyTimeout
	}
	var results []Result
	for _, p := range Properties() {
		if re != nil && !re.MatchString(p.Name) {
			continue
		}
		if opts.OnStart != nil {
			opts.OnStart(p.Name)
		}
		r := runStandaloneProperty(h, p, timeout)
		if opts.OnResult != nil {
			opts.OnResult(r)
		}
		results = append(results, r)
	}
	return results, nil
}

func runStandaloneProperty(h Harness, p Property, timeout time.Duration) Result {
	st := &standaloneT{name: p.Name}
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer st.runCleanups()
		defer func() {
			if v := recover(); v != nil {
				st.fail(fmt.Sprintf("panic: %v", v))
			}
		}()
		if h.NewStore == nil {
			st.Fatalf("conformance: Harness %q has no NewStore", h.Name)
		}
		runProperty(st, h, p, timeout)
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		st.fail(fmt.Sprintf("timed out after %v (abandoned while still running)", timeout))
	}
	return st.result(time.Since(start))
}

// standaloneT is RunStandalone's T. It is safe for concurrent use, except
// that Fatalf and Skipf must be called from the property's own goroutine
// (as with testing.T).
type standaloneT struct {
	name string

	mu       sync.Mutex
	failed   bool
	skipped  bool
	msgs     []string
	cleanups []func()
	tempDirs int
}

var _ T = (*standaloneT)(nil)

func (s *standaloneT) Helper()      {}
func (s *standaloneT) Name() string { return s.name }

func (s *standaloneT) log(msg string) {
	s.mu.Lock()
	s.msgs = append(s.msgs, msg)
	s.mu.Unlock()
}

func (s *standaloneT) fail(msg string) {
	s.mu.Lock()
	s.failed = true
	s.msgs = append(s.msgs, msg)
	s.mu.Unlock()
}

func (s *standaloneT) Logf(format string, args ...any) { s.log(fmt.Sprintf(format, args...)) }

func (s *standaloneT) Errorf(format string, args ...any) { s.fail(fmt.Sprintf(format, args...)) }

func (s *standaloneT) Fatalf(format string, args ...any) {
	s.fail(fmt.Sprintf(format, args...))
	runtime.Goexit()
}

func (s *standaloneT) Skipf(format string, args ...any) {
	s.mu.Lock()
	s.skipped = true
	s.msgs = append(s.msgs, fmt.Sprintf(format, args...))
	s.mu.Unlock()
	runtime.Goexit()
}

func (s *standaloneT) Failed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}

func (s *standaloneT) Cleanup(f func()) {
	s.mu.Lock()
	s.cleanups = append(s.cleanups, f)
	s.mu.Unlock()
}

func (s *standaloneT) TempDir() string {
	s.mu.Lock()
	s.tempDirs++
	n := s.tempDirs
	s.mu.Unlock()
	pattern := strings.NewReplacer("/", "_", " ", "_").Replace(s.name) + fmt.Sprintf("-%d-", n)
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		s.Fatalf("TempDir: %v", err)
	}
	s.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// runCleanups runs the registered cleanups, last first; a panicking
// cleanup is a failure and does not stop the others.
func (s *standaloneT) runCleanups() {
	for {
		s.mu.Lock()
		n := len(s.cleanups)
		if n == 0 {
			s.mu.Unlock()
			return
		}
		f := s.cleanups[n-1]
		s.cleanups = s.cleanups[:n-1]
		s.mu.Unlock()
		func() {
			defer func() {
				if v := recover(); v != nil {
					s.fail(fmt.Sprintf("panic in cleanup: %v", v))
				}
			}()
			// A Fatalf in a cleanup ends only that cleanup.
			done := make(chan struct{})
			go func() {
				defer close(done)
				defer func() {
					if v := recover(); v != nil {
						s.fail(fmt.Sprintf("panic in cleanup: %v", v))
					}
				}()
				f()
			}()
			<-done
		}()
	}
}

func (s *standaloneT) result(d time.Duration) Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := Result{Name: s.name, Duration: d, Messages: append([]string(nil), s.msgs...)}
	switch {
	case s.failed:
		r.Status = Failed
	case s.skipped:
		r.Status = Skipped
	default:
		r.Status = Passed
	}
	return r
}
