package conformance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaplane/metaplane/core"
)

// Capability names a Property may need. The first group are
// core.Capabilities fields declared by the backend; HarnessCompactor is a
// feature of the harness's Store (see Compactor), and so is
// NeedsDescriptor (see Describer), NeedsSpareMember (see SpareMaker) and
// NeedsSilencer (see Silencer).
const (
	NeedsExactHistory   = "ExactHistory"
	NeedsStaleReads     = "StaleReads"
	NeedsLeases         = "Leases"
	NeedsFaultInjection = "FaultInjection"
	NeedsNativeIDs      = "NativeIDAllocation"
	NeedsImport         = "Import"
	// NeedsStreamedSnapshots: the backend declares StreamedSnapshots and
	// implements core.SnapshotStreamer.
	NeedsStreamedSnapshots = "StreamedSnapshots"
	NeedsCompactor         = "Compactor"
	NeedsDescriptor        = "Descriptor"
	NeedsSpareMember       = "SpareMember"
	NeedsSilencer          = "Silencer"

	NeedsFollowerReads = "LinearizableFollowerReads"
	NeedsMembership    = "Membership"
)

// HostAnswerable is a regular expression (for StandaloneOptions.Run)
// matching the properties that a client layer in front of the backend
// can answer by itself, without asking the backend: those about a call
// whose context has already ended and about calls after Close. The plugin
// host's client is such a layer; plugintest's harnesses therefore open
// clients that pass these calls through to the plugin (see
// docs/conformance.md).
const HostAnswerable = `^(Context/.*|Closed/CallsFail|Election/Campaign/CancelledContext)$`

// PropertyTimeout bounds one property by default: its context ends after
// it and the property fails, naming where it was waiting.
const PropertyTimeout = 60 * time.Second

// waitTimeout bounds every wait for something another client, a session's
// end or a watch must bring about: generous, for replicated backends on
// slow machines, and multiplied by Harness.TimeScale (env.wait).
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

// SpareMaker is implemented by a harness's Store of a backend with
// Membership that can start one more member of the store's cluster, for
// Membership/AddRemove. Without it that property is skipped.
type SpareMaker interface {
	// SpareMember prepares a member that is not among the store's members:
	// its id and address, as AddVoter takes them, and start, which starts
	// it as a member joining the cluster and returns a client of it. The
	// suite calls start while its AddVoter runs (once the leader lists the
	// new member, or AddVoter has returned, or after 2 s), since a backend
	// may need the member known before it starts or started before it
	// catches up. The store stops the member at cleanup.
	SpareMember(t T) (id, address string, start func() core.MetadataBackend)
}

// Silencer is implemented by a harness's Store that can cut one client off
// as a crashed or partitioned client would be, without closing it, for
// Session/Timeout/Honoured. Without it that property is skipped.
type Silencer interface {
	// Silence stops c's heartbeats for good: from its return on, c's
	// session gets no renewal, so the backend must expire it after its
	// timeout, and c's calls may hang or fail. The suite does not use c
	// afterwards except to close it at cleanup, which must still return
	// (the store may, for instance, cut c's connection at cleanup first).
	Silence(t T, c core.MetadataBackend)
}

// Properties returns the suite's properties in the order they run. The
// slice belongs to the caller.
func Properties() []Property {
	var ps []Property
	for _, group := range [][]Property{
		pathProperties(), createProperties(), sequentialReuseProperties(), readProperties(),
		writeProperties(), statProperties(), txnProperties(), sessionProperties(),
		sessionTimeoutProperties(), watchProperties(), slowConsumerProperties(), snapshotProperties(), snapshotWriterProperties(),
		electionProperties(), blockedProperties(), idProperties(), leaseProperties(), importProperties(), contextProperties(),
		closedProperties(), faultProperties(), statusProperties(), memberProperties(), descriptorProperties(),
	} {
		ps = append(ps, group...)
	}
	return ps
}

// Run runs every property against the harness's backend, each as a subtest
// of t named after the property, each on a fresh store from h.NewStore.
// Properties needing a capability the backend does not declare are skipped
// with a message naming it. Each property is bounded by PropertyTimeout
// (see runProperty). Call it from a Go test:
//
//	func TestConformance(t *testing.T) { conformance.Run(t, myHarness) }
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.NewStore == nil {
		t.Fatalf("conformance: Harness %q has no NewStore", h.Name)
	}
	known := &knownNeeds{}
	for _, p := range Properties() {
		t.Run(p.Name, func(t *testing.T) {
			t.Helper()
			runProperty(context.Background(), t, h, p, h.scale(PropertyTimeout), stopGrace, known)
		})
	}
}

// stopGrace is how long a property whose context has ended may take to
// return before its cleanups are run from outside it (stopping its store,
// so that a call the backend never answers fails), and again how long
// RunStandalone then waits before abandoning it.
const stopGrace = 5 * time.Second

// propertySeq numbers property runs, for their goroutine labels.
var propertySeq atomic.Int64

// propertyLabel is the pprof label key that marks a property's goroutines
// (the ones it starts inherit it), so that a timed-out property can be
// described by where they wait.
const propertyLabel = "conformance-property"

// runProperty sets up a fresh store and runs one property on t. The
// property's context ends after timeout or when parent ends. When it ends
// before the property has returned, t fails naming where the property's
// goroutines wait; if the property has still not returned after grace
// and t is RunStandalone's, its cleanups (the store's shutdown among them)
// run at once, from a watchdog goroutine, so that a backend call that
// ignores its context fails instead of hanging the run.
func runProperty(parent context.Context, t T, h Harness, p Property, timeout, grace time.Duration, known *knownNeeds) {
	t.Helper()
	// A capability an earlier store of this run lacked is lacked again:
	// skip without starting a store (a three-voter store takes seconds).
	if why := known.missing(p.Needs); why != "" {
		t.Skipf("%s", why)
	}
	pt := &propRun{t: t}
	// The watchdog ends ctx, after describing where the property waits,
	// so that the description is taken while it still waits.
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	label := fmt.Sprintf("%d %s", propertySeq.Add(1), p.Name)
	done := make(chan struct{})
	defer func() {
		// A property that returned after its context ended failed, even
		// if it did not notice.
		if ctx.Err() != nil {
			pt.ended(endReason(parent, timeout), "")
		}
		pt.finish()
		close(done)
	}()
	go watchProperty(cancel, parent, done, pt, label, timeout, grace)
	pprof.Do(ctx, pprof.Labels(propertyLabel, label), func(ctx context.Context) {
		store := h.NewStore(t)
		if store == nil {
			t.Fatalf("conformance: harness %q returned a nil store", h.Name)
		}
		e := &env{t: t, store: store, ctx: ctx, h: h, wait: h.scale(waitTimeout)}
		e.c0 = e.client()
		e.caps = e.c0.Capabilities()
		if p.Needs != "" {
			for _, need := range strings.Split(p.Needs, "+") {
				ok, why := e.has(need)
				known.learn(need, ok, why)
				if !ok {
					t.Skipf("%s", why)
				}
			}
		}
		if _, _, err := core.Create(ctx, e.c0, base, nil, core.CreateOptions{}); err != nil {
			t.Fatalf("setup: create %s: %v", base, err)
		}
		p.run(e)
	})
}

// knownNeeds remembers, for one run of the suite against one harness,
// which needs the harness's stores were found to lack and why: a backend's
// capabilities and optional parts are the same on every store it makes.
type knownNeeds struct {
	mu      sync.Mutex
	lacking map[string]string // need -> why it is lacking
}

func (k *knownNeeds) learn(need string, ok bool, why string) {
	if ok {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.lacking == nil {
		k.lacking = map[string]string{}
	}
	k.lacking[need] = why
}

// missing returns why one of needs ("a+b") is known to be lacking, or "".
func (k *knownNeeds) missing(needs string) string {
	if needs == "" {
		return ""
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, need := range strings.Split(needs, "+") {
		if why, ok := k.lacking[need]; ok {
			return why
		}
	}
	return ""
}

// watchProperty is runProperty's watchdog; see there.
func watchProperty(cancel context.CancelCauseFunc, parent context.Context, done <-chan struct{}, pt *propRun, label string, timeout, grace time.Duration) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	select {
	case <-done:
		return
	case <-deadline.C:
	case <-parent.Done():
		grace = 0 // interrupted: stop at once
	}
	why := endReason(parent, timeout)
	pt.ended(why, describeWaits(label))
	cancel(errors.New(why))
	select {
	case <-done:
		return
	case <-time.After(grace):
	}
	if _, ok := pt.t.(interface{ runCleanups() }); ok {
		pt.report(fmt.Sprintf("the property did not return within %v of its context's end: running its cleanups (stopping the store) from outside it", grace))
		pt.stop()
	}
}

// propRun is the watchdog's side of one property run: it fails the
// property at most once for its context's end, never after the property
// has finished (testing.T panics on that), and can stop the property's
// store early when its T allows it (RunStandalone's T does; under Run the
// cleanups are the testing package's, which a harness may rely on, e.g.
// by asserting its T is a testing.TB, so there a call that ignores its
// context is left to go test's -timeout).
type propRun struct {
	t        T
	endOnce  sync.Once
	mu       sync.Mutex
	finished bool
}

// report fails the property with msg unless it has finished.
func (pt *propRun) report(msg string) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if !pt.finished {
		pt.t.Errorf("%s", msg)
	}
}

// stop runs the property's cleanups now, if its T can (see propRun).
func (pt *propRun) stop() {
	if s, ok := pt.t.(interface{ runCleanups() }); ok {
		s.runCleanups()
	}
}

// ended fails the property once for its context's end (why), naming
// where it was waiting when waits is not empty.
func (pt *propRun) ended(why, waits string) {
	pt.endOnce.Do(func() {
		if waits != "" {
			why += ", waiting in: " + waits
		}
		if r, ok := pt.t.(interface{ setEnded(string) }); ok {
			r.setEnded(why)
		}
		pt.report(why)
	})
}

// endReason says why a property's context ended.
func endReason(parent context.Context, timeout time.Duration) string {
	if parent.Err() != nil {
		return fmt.Sprintf("interrupted (%v)", context.Cause(parent))
	}
	return fmt.Sprintf("timed out after %v", timeout)
}

func (pt *propRun) finish() {
	pt.mu.Lock()
	pt.finished = true
	pt.mu.Unlock()
}

// describeWaits says where the goroutines labelled with label (a
// property's) are blocked: for each, the innermost frame outside the Go
// runtime, the standard library and the gRPC transport, and the innermost
// frame of the suite's own properties, e.g. "plugins.(*Client).Children
// (client.go:312) from conformance.readProperties.func4
// (properties_tree.go:120)". It returns "" when none is left.
func describeWaits(label string) string {
	var b strings.Builder
	if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
		return ""
	}
	want := fmt.Sprintf("%q:%q", propertyLabel, label)
	var out []string
	for _, rec := range strings.Split(b.String(), "\n\n") {
		if !strings.Contains(rec, want) {
			continue
		}
		var inner, prop string
		for _, line := range strings.Split(rec, "\n") {
			// "#\t0x4a5b2c\tpkg.Func+0x12c\t/path/file.go:300"
			fs := strings.Fields(line)
			if len(fs) != 4 || fs[0] != "#" {
				continue
			}
			fn := fs[2]
			if i := strings.LastIndex(fn, "+0x"); i >= 0 {
				fn = fn[:i]
			}
			where := fmt.Sprintf("%s (%s)", shortFunc(fn), filepath.Base(fs[3]))
			if inner == "" && !boringFrame(fn, fs[3]) {
				// The call it waits in is the method, not the closure
				// the method hands its RPC in.
				inner = fmt.Sprintf("%s (%s)", closureFree(shortFunc(fn)), filepath.Base(fs[3]))
			}
			if prop == "" && strings.HasPrefix(fn, suitePackage+".") && !strings.Contains(fs[3], "/conformance/run.go") {
				prop = where
			}
		}
		if prop == "" {
			// A goroutine the backend started (it inherits the label),
			// not one of the property's.
			continue
		}
		if inner == "" {
			inner = prop
		} else if prop != inner {
			inner += " from " + prop
		}
		if n, _, ok := strings.Cut(rec, " @ "); ok && n != "1" {
			inner = n + " goroutines in " + inner
		}
		out = append(out, inner)
		if len(out) == 5 {
			break
		}
	}
	return strings.Join(out, "; ")
}

// suitePackage is this package's import path, for describeWaits.
const suitePackage = "github.com/metaplane/metaplane/conformance"

// boringFrame reports whether fn (in file) belongs to the Go runtime, the
// standard library, the RPC transport or generated wire code: not what a
// property is said to wait in.
func boringFrame(fn, file string) bool {
	if strings.Contains(file, ".pb.go:") {
		return true // generated wire code
	}
	for _, p := range []string{"google.golang.org/grpc", "google.golang.org/protobuf", "golang.org/x/net"} {
		if strings.HasPrefix(fn, p) {
			return true
		}
	}
	// The first element of the package path: a standard library package's
	// has no dot ("runtime", "internal/poll", "sync").
	first, _, found := strings.Cut(fn, "/")
	if !found {
		first, _, _ = strings.Cut(fn, ".")
	}
	return first != "main" && !strings.Contains(first, ".")
}

// closureFree drops the closure suffixes of a function name:
// "plugins.(*Client).Children.func1" is "plugins.(*Client).Children".
func closureFree(fn string) string {
	digits := func(x string) bool { return x != "" && strings.Trim(x, "0123456789") == "" }
	for {
		i := strings.LastIndex(fn, ".")
		if i < 0 {
			return fn
		}
		last := fn[i+1:]
		if !digits(last) && !(strings.HasPrefix(last, "func") && digits(last[4:])) {
			return fn
		}
		fn = fn[:i]
	}
}

// shortFunc drops the module path from a function name:
// "github.com/metaplane/metaplane/plugins.(*Client).Get" is
// "plugins.(*Client).Get".
func shortFunc(fn string) string {
	if i := strings.LastIndex(fn, "/"); i >= 0 {
		return fn[i+1:]
	}
	return fn
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
	case NeedsStreamedSnapshots:
		_, impl := core.Optional[core.SnapshotStreamer](e.c0)
		ok = e.caps.StreamedSnapshots && impl
	case NeedsFollowerReads:
		ok = e.caps.LinearizableFollowerReads
	case NeedsMembership:
		_, impl := core.Optional[core.MembershipManager](e.c0)
		ok = e.caps.Membership && impl
	case NeedsNativeIDs:
		_, impl := core.Optional[core.IDAllocator](e.c0)
		ok = e.caps.NativeIDAllocation && impl
	case NeedsDescriptor:
		_, ok = e.store.(Describer)
		if !ok {
			return false, fmt.Sprintf("harness %q does not implement conformance.Describer", e.h.Name)
		}
		return true, ""
	case NeedsCompactor:
		_, ok = e.store.(Compactor)
		if !ok {
			return false, fmt.Sprintf("harness %q does not implement conformance.Compactor", e.h.Name)
		}
		return true, ""
	case NeedsSpareMember:
		_, ok = e.store.(SpareMaker)
		if !ok {
			return false, fmt.Sprintf("harness %q does not implement conformance.SpareMaker", e.h.Name)
		}
		return true, ""
	case NeedsSilencer:
		_, ok = e.store.(Silencer)
		if !ok {
			return false, fmt.Sprintf("harness %q does not implement conformance.Silencer", e.h.Name)
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
	// Ended, for a property whose context ended before it returned, says
	// why and where it was waiting: "timed out after 1m0s, waiting in:
	// plugins.(*Client).Children (client.go:300) from ..." or
	// "interrupted (...)". It is among Messages too.
	Ended string `json:"ended,omitempty"`
}

// StandaloneOptions are the options of RunStandalone.
type StandaloneOptions struct {
	// Run, when not empty, is a regular expression; only properties whose
	// name it matches (anywhere, as regexp.MatchString does) run.
	Run string
	// Timeout bounds each property (0: PropertyTimeout), times the
	// harness's TimeScale: its context ends then and it fails, naming
	// where it was waiting. A property that has
	// not returned 5 s later has its cleanups run from outside (its store
	// stopped), and one still running 5 s after that is abandoned.
	Timeout time.Duration
	// Context, when set, ends the run: the running property's context
	// ends, it fails as interrupted, its cleanups run at once, and no
	// further property starts. RunStandalone then returns the results so
	// far and an error wrapping ErrInterrupted.
	Context context.Context
	// OnStart and OnResult, when set, are called before and after each
	// property, for progress output.
	OnStart  func(name string)
	OnResult func(Result)
}

// ErrInterrupted is returned, wrapped, by RunStandalone when its
// StandaloneOptions.Context ended the run.
var ErrInterrupted = errors.New("conformance: run interrupted")

// RunStandalone runs the suite without `go test` (the `metaplane
// conformance` command): each selected property on a fresh store, one after
// the other, each in its own goroutine with its own T, so that Fatalf ends
// only that property. A panic in a property is a failure. It returns one
// Result per property run, in order. Errors: a Run expression that does
// not compile; ErrInterrupted (with the results so far, the interrupted
// property's among them, failed) when opts.Context ended.
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
	timeout = h.scale(timeout)
	ctx := opts.Context
	if ctx == nil {
		ctx = context.Background()
	}
	var results []Result
	known := &knownNeeds{}
	for _, p := range Properties() {
		if re != nil && !re.MatchString(p.Name) {
			continue
		}
		if ctx.Err() != nil {
			return results, fmt.Errorf("%w: %v", ErrInterrupted, context.Cause(ctx))
		}
		if opts.OnStart != nil {
			opts.OnStart(p.Name)
		}
		r := runStandaloneProperty(ctx, h, p, timeout, stopGrace, known)
		if opts.OnResult != nil {
			opts.OnResult(r)
		}
		results = append(results, r)
	}
	if ctx.Err() != nil {
		return results, fmt.Errorf("%w: %v", ErrInterrupted, context.Cause(ctx))
	}
	return results, nil
}

func runStandaloneProperty(ctx context.Context, h Harness, p Property, timeout, grace time.Duration, known *knownNeeds) Result {
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
		runProperty(ctx, st, h, p, timeout, grace, known)
	}()
	// runProperty's watchdog fails the property at its deadline and runs
	// its cleanups grace later; after one more grace it is abandoned.
	abandon := time.NewTimer(timeout + 2*grace)
	defer abandon.Stop()
	select {
	case <-done:
	case <-abandon.C:
		st.fail(fmt.Sprintf("still running %v after its deadline: abandoned", 2*grace))
	case <-ctx.Done():
		// The watchdog runs the cleanups at once; give the property grace
		// to return, no more.
		select {
		case <-done:
		case <-time.After(grace):
			st.fail("interrupted: abandoned while still running")
		}
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
	ended    string
	cleanups []func()
	tempDirs int
}

func (s *standaloneT) setEnded(why string) {
	s.mu.Lock()
	s.ended = why
	s.mu.Unlock()
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
	r := Result{Name: s.name, Duration: d, Messages: append([]string(nil), s.msgs...), Ended: s.ended}
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
