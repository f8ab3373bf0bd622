package plugins_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/plugins"
	pb "github.com/metaplane/metaplane/proto/metaplane/v1"
)

func oneEvent(rev int64, data []byte) core.WatchResponse {
	return core.WatchResponse{Revision: rev, Events: []core.WatchEvent{
		{Type: core.EventUpdated, Path: fmt.Sprintf("/w/n%d", rev), Data: data, Revision: rev},
	}}
}

// TestPumpWatchCoalesces: the responses waiting in the backend's channel go
// out merged, in order and with the last one's revision, within the
// bounds; a reset and the final error go out alone.
func TestPumpWatchCoalesces(t *testing.T) {
	var in []core.WatchResponse
	rev := int64(0)
	for i := 0; i < 100; i++ {
		rev++
		in = append(in, oneEvent(rev, []byte("v")))
	}
	rev++
	in = append(in, core.WatchResponse{Reset: true, Revision: rev, Events: []core.WatchEvent{
		{Type: core.EventCreated, Path: "/w/r", Data: []byte("r"), Revision: rev},
	}})
	for i := 0; i < 50; i++ {
		rev++
		in = append(in, oneEvent(rev, []byte("v")))
	}
	// One response beyond the count bound: alone, whole.
	rev++
	big := core.WatchResponse{Revision: rev}
	for i := 0; i < plugins.WatchMergeEvents+10; i++ {
		big.Events = append(big.Events, core.WatchEvent{Type: core.EventUpdated, Path: fmt.Sprintf("/w/b%d", i), Revision: rev})
	}
	in = append(in, big)
	// Responses whose data crosses the byte bound after a few.
	large := make([]byte, plugins.WatchMergeBytes/4)
	for i := 0; i < 10; i++ {
		rev++
		in = append(in, oneEvent(rev, large))
	}
	in = append(in, core.WatchResponse{Revision: rev, Err: fmt.Errorf("%w: watch ended", core.ErrCompacted)})

	ch := make(chan core.WatchResponse, len(in))
	for _, r := range in {
		ch <- r
	}
	var out []*pb.WatchResponse
	err := plugins.PumpWatch(context.Background(), ch, false, func(m *pb.WatchResponse) error {
		out = append(out, m)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) >= len(in) {
		t.Fatalf("%d responses went out as %d messages: nothing merged", len(in), len(out))
	}
	// Every event once, in order; the reset and the error alone.
	var want, got []string
	for _, r := range in {
		for _, e := range r.Events {
			want = append(want, e.Path)
		}
	}
	var lastRev int64
	for i, m := range out {
		data := 0
		for _, e := range m.Events {
			got = append(got, e.Path)
			data += len(e.Data)
		}
		if m.Revision < lastRev {
			t.Fatalf("message %d: revision %d after %d", i, m.Revision, lastRev)
		}
		lastRev = m.Revision
		if m.Reset_ && (len(m.Events) != 1 || m.Events[0].Path != "/w/r") {
			t.Fatalf("message %d: the reset was merged: %d events", i, len(m.Events))
		}
		if m.Error != nil && len(m.Events) != 0 {
			t.Fatalf("message %d: the error was merged with %d events", i, len(m.Events))
		}
		if len(m.Events) > plugins.WatchMergeEvents && len(m.Events) != len(big.Events) {
			t.Fatalf("message %d: %d events, bound %d", i, len(m.Events), plugins.WatchMergeEvents)
		}
		if data > plugins.WatchMergeBytes {
			t.Fatalf("message %d: %d bytes of data, bound %d", i, data, plugins.WatchMergeBytes)
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("events out differ from events in (%d out, %d in)", len(got), len(want))
	}
	if first := out[0]; len(first.Events) != 100 || first.Revision != 100 {
		t.Fatalf("first message: %d events up to revision %d, want the 100 before the reset up to 100", len(first.Events), first.Revision)
	}
	if last := out[len(out)-1]; last.Error == nil {
		t.Fatal("the last message is not the error")
	}
}

// TestWatchBurstCrossesInFewMessages: a burst of writes reaches a host
// watch in fewer plugin messages than writes (counted in the plugin
// server), every event exactly once and in revision order.
func TestWatchBurstCrossesInFewMessages(t *testing.T) {
	const n = 2000
	const prefix = "/burst"
	var mu sync.Mutex
	messages := 0
	defer plugins.OnWatchMessage(func(m *pb.WatchResponse) {
		if len(m.Events) > 0 && strings.HasPrefix(m.Events[0].Path, prefix+"/") {
			mu.Lock()
			messages++
			mu.Unlock()
		}
	})()
	c := client(t, connect(t, memory.NewProvider(memory.StoreOptions{})))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, _, err := core.Create(ctx, c, prefix, nil, core.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The burst is in the history before the watch starts: the backend
	// delivers it as fast as it can, one response per write.
	var first int64
	for i := 0; i < n; i++ {
		_, st, err := core.Create(ctx, c, fmt.Sprintf("%s/n%05d", prefix, i), []byte("v"), core.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = st.CreateRevision
		}
	}
	ch, err := c.Watch(ctx, prefix, first)
	if err != nil {
		t.Fatal(err)
	}
	responses, next := 0, 0
	lastRev := first - 1
	for next < n {
		var r core.WatchResponse
		select {
		case r = <-ch:
		case <-ctx.Done():
			t.Fatalf("%d of %d events after %d responses: %v", next, n, responses, ctx.Err())
		}
		if r.Err != nil {
			t.Fatalf("watch ended: %v", r.Err)
		}
		responses++
		for _, e := range r.Events {
			if want := fmt.Sprintf("%s/n%05d", prefix, next); e.Path != want || e.Revision <= lastRev {
				t.Fatalf("event %d: %s at revision %d, want %s after revision %d", next, e.Path, e.Revision, want, lastRev)
			}
			lastRev = e.Revision
			next++
		}
		if r.Revision != lastRev {
			t.Fatalf("response revision %d, its last event's %d", r.Revision, lastRev)
		}
	}
	cancel()
	for range ch { // drain until the host closes it
	}
	mu.Lock()
	defer mu.Unlock()
	if messages >= n || responses != messages {
		t.Fatalf("%d writes crossed in %d plugin messages (%d host responses), want fewer messages than writes, one response each", n, messages, responses)
	}
	t.Logf("%d writes crossed in %d plugin messages", n, messages)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("timed out")
	}
}

// TestPumpWatchParts: with a host that joins parts, a response beyond the
// bounds (a Reset of a large tree) goes out as parts within them, in
// order, each with the response's reset and revision, all but the last
// marked more; without, it goes out whole.
func TestPumpWatchParts(t *testing.T) {
	const n = 3*plugins.WatchMergeEvents + 10
	reset := core.WatchResponse{Reset: true, Revision: 77}
	for i := 0; i < n; i++ {
		reset.Events = append(reset.Events, core.WatchEvent{Type: core.EventCreated, Path: fmt.Sprintf("/r/n%06d", i), Data: []byte("d"), Revision: 77})
	}
	after := oneEvent(78, []byte("v"))
	for _, parts := range []bool{true, false} {
		ch := make(chan core.WatchResponse, 2)
		ch <- reset
		ch <- after
		close(ch)
		var out []*pb.WatchResponse
		if err := plugins.PumpWatch(context.Background(), ch, parts, func(m *pb.WatchResponse) error {
			out = append(out, m)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if !parts {
			if len(out) != 2 || len(out[0].Events) != n || out[0].More {
				t.Fatalf("without parts: %d messages, the first with %d events (more %v), want the reset whole", len(out), len(out[0].Events), out[0].More)
			}
			continue
		}
		if len(out) < 4 {
			t.Fatalf("with parts: %d messages for a reset of %d events, want at least 4", len(out), n)
		}
		next := 0
		for i, m := range out[:len(out)-1] {
			last := i == len(out)-2
			if !m.Reset_ || m.Revision != 77 || m.More == last || len(m.Events) > plugins.WatchMergeEvents {
				t.Fatalf("part %d: reset %v, revision %d, more %v, %d events", i, m.Reset_, m.Revision, m.More, len(m.Events))
			}
			for _, e := range m.Events {
				if want := fmt.Sprintf("/r/n%06d", next); e.Path != want {
					t.Fatalf("part %d: %s, want %s", i, e.Path, want)
				}
				next++
			}
		}
		if next != n {
			t.Fatalf("the parts hold %d events, want %d", next, n)
		}
		if m := out[len(out)-1]; m.Reset_ || m.More || m.Revision != 78 {
			t.Fatalf("the response after the reset: reset %v, more %v, revision %d", m.Reset_, m.More, m.Revision)
		}
	}
}

// TestWatchLargeResponseCrossesInParts: a transaction whose changes are
// larger than one watch message crosses the plugin boundary in parts and
// reaches the host as one response, whole.
func TestWatchLargeResponseCrossesInParts(t *testing.T) {
	const prefix = "/large"
	var mu sync.Mutex
	var parts []bool
	defer plugins.OnWatchMessage(func(m *pb.WatchResponse) {
		if len(m.Events) > 0 && strings.HasPrefix(m.Events[0].Path, prefix+"/") {
			mu.Lock()
			parts = append(parts, m.More)
			mu.Unlock()
		}
	})()
	c := client(t, connect(t, memory.NewProvider(memory.StoreOptions{})))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, st, err := core.Create(ctx, c, prefix, nil, core.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := c.Watch(ctx, prefix, st.CreateRevision+1)
	if err != nil {
		t.Fatal(err)
	}
	const nodes = 8
	data := make([]byte, 300<<10)
	var ops []core.Op
	for i := 0; i < nodes; i++ {
		ops = append(ops, core.CreateOp(fmt.Sprintf("%s/n%d", prefix, i), data, core.Persistent))
	}
	res, err := c.Txn(ctx, ops, core.TxnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var r core.WatchResponse
	select {
	case r = <-ch:
	case <-ctx.Done():
		t.Fatal("no watch response")
	}
	if r.Err != nil || len(r.Events) != nodes || r.Revision != res.Revision {
		t.Fatalf("the host got %d events at revision %d (err %v), want the transaction's %d at %d in one response", len(r.Events), r.Revision, r.Err, nodes, res.Revision)
	}
	for i, e := range r.Events {
		if want := fmt.Sprintf("%s/n%d", prefix, i); e.Path != want || len(e.Data) != len(data) {
			t.Fatalf("event %d: %s with %d bytes, want %s with %d", i, e.Path, len(e.Data), want, len(data))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(parts) < 2 || parts[len(parts)-1] {
		t.Fatalf("the transaction crossed in %d messages (more flags %v), want parts, the last not marked more", len(parts), parts)
	}
}

// TestResetPagesAcrossTheBoundary: a Reset in pages crosses as pages (each
// message keeps partial, for a host that asks for parts); for a host that
// does not (it predates the pages), the pages are joined into one Reset
// first, and the responses after it pass as they are.
func TestResetPagesAcrossTheBoundary(t *testing.T) {
	page := func(i int, partial bool) core.WatchResponse {
		return core.WatchResponse{Reset: true, Partial: partial, Revision: 9,
			Events: []core.WatchEvent{{Type: core.EventCreated, Path: fmt.Sprintf("/p/n%d", i), Revision: 9}}}
	}
	feed := func() chan core.WatchResponse {
		ch := make(chan core.WatchResponse, 4)
		ch <- page(0, true)
		ch <- page(1, true)
		ch <- page(2, false)
		ch <- oneEvent(10, []byte("v"))
		close(ch)
		return ch
	}
	var out []*pb.WatchResponse
	if err := plugins.PumpWatch(context.Background(), feed(), true, func(m *pb.WatchResponse) error {
		out = append(out, m)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(out) != 4 || !out[0].Partial || !out[1].Partial || out[2].Partial || !out[2].Reset_ || out[3].Reset_ || out[3].Partial {
		t.Fatalf("with parts: %d messages %v, want three pages (partial, partial, last) and the event", len(out), out)
	}
	var joined []core.WatchResponse
	for r := range plugins.JoinResetPages(context.Background(), feed()) {
		joined = append(joined, r)
	}
	if len(joined) != 2 || !joined[0].Reset || joined[0].Partial || len(joined[0].Events) != 3 || joined[0].Events[2].Path != "/p/n2" || joined[1].Reset || joined[1].Revision != 10 {
		t.Fatalf("joined for an older host: %+v, want one Reset of 3 events, then the event", joined)
	}
}
