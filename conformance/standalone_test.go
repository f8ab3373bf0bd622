package conformance

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/core"
)

// internalHarness runs properties on the memory backend from inside the
// package, to test the standalone runner itself.
type internalStore struct{ s *memory.Store }

func (m internalStore) NewClient(t T, opts ClientOptions) core.MetadataBackend {
	c := m.s.NewClient(core.ClientOptions{SessionTimeout: opts.SessionTimeout})
	t.Cleanup(func() { c.Close() })
	return c
}

func (m internalStore) ExpireSession(t T, c core.MetadataBackend) {
	if err := c.(core.SessionExpirer).ExpireSession(context.Background()); err != nil {
		t.Fatalf("expire: %v", err)
	}
}

var internalHarness = Harness{
	Name: "memory",
	NewStore: func(t T) Store {
		s := memory.NewStore(memory.StoreOptions{})
		t.Cleanup(func() { s.Close() })
		return internalStore{s}
	},
}

func TestRunStandaloneFiltersAndPasses(t *testing.T) {
	var started []string
	results, err := RunStandalone(internalHarness, StandaloneOptions{
		Run:     "^Create/Sequential/|^Watch/Compacted/",
		OnStart: func(name string) { started = append(started, name) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) == 0 || len(results) != len(started) {
		t.Fatalf("%d results, %d started", len(results), len(started))
	}
	for _, r := range results {
		switch {
		case strings.HasPrefix(r.Name, "Create/Sequential/"):
			if r.Status != Passed {
				t.Errorf("%s: %s %v, want passed", r.Name, r.Status, r.Messages)
			}
		case strings.HasPrefix(r.Name, "Watch/Compacted/"):
			// The internal harness implements no Compactor.
			if r.Status != Skipped || len(r.Messages) != 1 || !strings.Contains(r.Messages[0], "Compactor") {
				t.Errorf("%s: %s %v, want skipped naming Compactor", r.Name, r.Status, r.Messages)
			}
		default:
			t.Errorf("%s ran although --run did not select it", r.Name)
		}
	}
}

func TestRunStandaloneBadRegexp(t *testing.T) {
	if _, err := RunStandalone(internalHarness, StandaloneOptions{Run: "("}); err == nil || !strings.Contains(err.Error(), "(") {
		t.Fatalf("bad regexp: got %v, want an error naming it", err)
	}
}

func TestStandalonePropertyOutcomes(t *testing.T) {
	reachedAfterFatal := false
	cleaned := 0
	cases := []struct {
		name    string
		run     func(e *env)
		timeout time.Duration
		want    Status
		msg     string
	}{
		{"pass", func(e *env) { e.t.Cleanup(func() { cleaned++ }) }, time.Minute, Passed, ""},
		{"fatal", func(e *env) {
			e.t.Cleanup(func() { cleaned++ })
			e.t.Fatalf("boom %d", 1)
			reachedAfterFatal = true
		}, time.Minute, Failed, "boom 1"},
		{"error", func(e *env) { e.t.Errorf("soft"); e.t.Logf("still running") }, time.Minute, Failed, "soft"},
		{"panic", func(e *env) { panic("kaboom") }, time.Minute, Failed, "panic: kaboom"},
		{"skip", func(e *env) { e.t.Skipf("not today") }, time.Minute, Skipped, "not today"},
		{"timeout", func(e *env) { <-e.ctx.Done() }, 100 * time.Millisecond, Failed, "timed out"},
		{"needs", nil, time.Minute, Skipped, "does not declare NativeIDAllocation"},
	}
	for _, tc := range cases {
		p := Property{Name: "Test/" + tc.name, run: tc.run}
		if tc.run == nil {
			p.Needs = "NativeIDAllocation"
			p.run = func(e *env) { t.Errorf("a property needing an undeclared capability ran") }
		}
		r := runStandaloneProperty(context.Background(), internalHarness, p, tc.timeout, time.Second, &knownNeeds{})
		if r.Status != tc.want {
			t.Errorf("%s: status %s (%v), want %s", tc.name, r.Status, r.Messages, tc.want)
		}
		if tc.msg != "" && !strings.Contains(strings.Join(r.Messages, "\n"), tc.msg) {
			t.Errorf("%s: messages %v, want one containing %q", tc.name, r.Messages, tc.msg)
		}
	}
	if reachedAfterFatal {
		t.Errorf("code after Fatalf ran")
	}
	if cleaned != 2 {
		t.Errorf("%d cleanups ran, want 2", cleaned)
	}
}

func TestPropertiesNamedAndUnique(t *testing.T) {
	seen := map[string]bool{}
	ps := Properties()
	if len(ps) < 60 {
		t.Fatalf("%d properties, want at least 60", len(ps))
	}
	for _, p := range ps {
		if p.Name == "" || p.Description == "" || p.run == nil {
			t.Errorf("property %q lacks a name, description or body", p.Name)
		}
		if seen[p.Name] {
			t.Errorf("property %q registered twice", p.Name)
		}
		seen[p.Name] = true
		for _, need := range strings.Split(p.Needs, "+") {
			switch need {
			case "", NeedsExactHistory, NeedsStaleReads, NeedsLeases, NeedsFaultInjection, NeedsNativeIDs, NeedsImport, NeedsStreamedSnapshots, NeedsCompactor, NeedsDescriptor, NeedsSpareMember, NeedsSilencer, NeedsFollowerReads, NeedsMembership:
			default:
				t.Errorf("property %q needs unknown capability %q", p.Name, need)
			}
		}
	}
}

// TestRegisterModelRejectsStaleRead makes sure the linearizability model
// can fail: a read of a value older than a completed write is illegal.
func TestRegisterModelRejectsStaleRead(t *testing.T) {
	history := []porcupine.Operation{
		{ClientId: 0, Input: regInput{op: "set", val: "a"}, Call: 0, Output: regOutput{ver: 1}, Return: 10},
		{ClientId: 1, Input: regInput{op: "get"}, Call: 20, Output: regOutput{val: "init", ver: 0}, Return: 30},
	}
	if porcupine.CheckOperations(registerModel.ToModel(), history) {
		t.Fatalf("a stale read after a completed write was judged linearizable")
	}
	history[1].Output = regOutput{val: "a", ver: 1}
	if !porcupine.CheckOperations(registerModel.ToModel(), history) {
		t.Fatalf("a fresh read after a completed write was judged not linearizable")
	}
	lost := []porcupine.Operation{
		{ClientId: 0, Input: regInput{op: "cas", val: "x", ver: 0}, Call: 0, Output: regOutput{ok: true, ver: 1}, Return: 10},
		{ClientId: 1, Input: regInput{op: "cas", val: "y", ver: 0}, Call: 20, Output: regOutput{ok: true, ver: 1}, Return: 30},
	}
	if porcupine.CheckOperations(registerModel.ToModel(), lost) {
		t.Fatalf("two successful compare-and-sets from version 0 were judged linearizable")
	}
}

// hangInCall stands for a backend call that ignores its context: it
// returns only when release is closed.
//
//go:noinline
func hangInCall(release <-chan struct{}) { <-release }

// TestStandaloneHungPropertyFailsInBoundedTime: a property blocked in a
// call that ignores its context fails at its deadline naming where it
// waits; its cleanups (a store's shutdown) are run from outside, which
// releases it, and the result comes back.
func TestStandaloneHungPropertyFailsInBoundedTime(t *testing.T) {
	p := Property{Name: "Test/hung", run: func(e *env) {
		release := make(chan struct{})
		e.t.Cleanup(func() { close(release) })
		hangInCall(release)
	}}
	r := runStandaloneProperty(context.Background(), internalHarness, p, 200*time.Millisecond, 200*time.Millisecond, &knownNeeds{})
	if r.Status != Failed {
		t.Fatalf("status %s (%v), want failed", r.Status, r.Messages)
	}
	all := strings.Join(r.Messages, "\n")
	for _, want := range []string{"timed out after 200ms", "waiting in: conformance.hangInCall (standalone_test.go:", "running its cleanups"} {
		if !strings.Contains(all, want) {
			t.Errorf("messages %q do not contain %q", r.Messages, want)
		}
	}
	if strings.Contains(all, "abandoned") {
		t.Errorf("the property was abandoned although its cleanups released it: %q", r.Messages)
	}
}

// TestStandaloneAbandonsUnreleasable: a property that nothing releases is
// abandoned after its deadline and two graces.
func TestStandaloneAbandonsUnreleasable(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	p := Property{Name: "Test/stuck", run: func(e *env) { hangInCall(release) }}
	r := runStandaloneProperty(context.Background(), internalHarness, p, 100*time.Millisecond, 100*time.Millisecond, &knownNeeds{})
	if r.Status != Failed || !strings.Contains(strings.Join(r.Messages, "\n"), "abandoned") {
		t.Fatalf("status %s (%v), want failed and abandoned", r.Status, r.Messages)
	}
}

// TestRunStandaloneInterrupted: ending opts.Context fails the running
// property as interrupted, starts no further one, and returns the results
// so far with ErrInterrupted.
func TestRunStandaloneInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := 0
	results, err := RunStandalone(internalHarness, StandaloneOptions{
		Run:     "^Create/",
		Context: ctx,
		OnStart: func(string) {
			if started++; started == 2 {
				cancel()
			}
		},
	})
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("err %v, want ErrInterrupted", err)
	}
	if started != 2 || len(results) != 2 {
		t.Fatalf("%d started, %d results, want 2 and 2", started, len(results))
	}
	if results[0].Status != Passed {
		t.Errorf("first property %s %v, want passed", results[0].Status, results[0].Messages)
	}
	if r := results[1]; r.Status != Failed || !strings.Contains(strings.Join(r.Messages, "\n"), "interrupted") {
		t.Errorf("interrupted property %s %v, want failed as interrupted", r.Status, r.Messages)
	}
}

// TestTimeScale: Harness.TimeScale multiplies the waits inside a property
// and RunStandalone's per-property deadline; below 1 it changes nothing.
func TestTimeScale(t *testing.T) {
	for _, tt := range []struct {
		scale float64
		want  time.Duration
	}{{0, waitTimeout}, {0.5, waitTimeout}, {1, waitTimeout}, {2.5, 50 * time.Second}} {
		h := internalHarness
		h.TimeScale = tt.scale
		var got time.Duration
		p := Property{Name: "Test/scale", run: func(e *env) { got = e.wait }}
		if r := runStandaloneProperty(context.Background(), h, p, time.Minute, time.Second, &knownNeeds{}); r.Status != Passed {
			t.Fatalf("scale %v: %s %v", tt.scale, r.Status, r.Messages)
		}
		if got != tt.want {
			t.Errorf("scale %v: waits of %v, want %v", tt.scale, got, tt.want)
		}
		if d := h.scale(PropertyTimeout); d != time.Duration(float64(PropertyTimeout)*max(tt.scale, 1)) {
			t.Errorf("scale %v: deadline %v", tt.scale, d)
		}
	}
}

// TestSkippedNeedStartsNoMoreStores: once a store of the run was found to
// lack a need, later properties with that need are skipped, naming it,
// without a store being made for them.
func TestSkippedNeedStartsNoMoreStores(t *testing.T) {
	var compacted []Property
	for _, p := range Properties() {
		if strings.Contains(p.Needs, NeedsCompactor) {
			compacted = append(compacted, p)
		}
	}
	if len(compacted) < 2 {
		t.Fatalf("%d properties need a Compactor; the test needs at least 2", len(compacted))
	}
	stores := 0
	h := internalHarness
	h.NewStore = func(t T) Store { stores++; return internalHarness.NewStore(t) }
	var names []string
	for _, p := range compacted {
		names = append(names, "^"+regexp.QuoteMeta(p.Name)+"$")
	}
	results, err := RunStandalone(h, StandaloneOptions{Run: strings.Join(names, "|")})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != len(compacted) {
		t.Fatalf("%d results, want %d", len(results), len(compacted))
	}
	for _, r := range results {
		if r.Status != Skipped || len(r.Messages) != 1 || !strings.Contains(r.Messages[0], "Compactor") {
			t.Errorf("%s: %s %v, want skipped naming Compactor", r.Name, r.Status, r.Messages)
		}
	}
	if stores != 1 {
		t.Errorf("%d stores made for %d skipped properties, want 1 (the first, which found the need lacking)", stores, len(compacted))
	}
}
