package plugins_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
	"github.com/metaplane/metaplane/plugins"
)

func launchMemory(t *testing.T) *plugins.Plugin {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := plugins.Launch(ctx, plugins.LaunchOptions{
		Path:   testutil.Binary(t, "metaplane-backend-memory"),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// concurrently runs write(w) for writers w = 0..n-1 at once and fails
// the test with the first error.
func concurrently(t *testing.T, n int, write func(w int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := 0; w < n; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			if err := write(w); err != nil {
				errs <- err
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// Concurrent writers' Txn calls cross a real plugin process on the
// connection's TxnStream, several calls per message, and each caller gets
// its own outcome: its own result, or its own op's error with the op's
// index.
func TestTxnStreamConcurrentCallsShareMessages(t *testing.T) {
	p := launchMemory(t)
	c := client(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, _, err := core.Create(ctx, c, "/taken", nil, core.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m0, n0 := plugins.TxnStreamCounts(c)
	const writers, each = 64, 30
	concurrently(t, writers, func(w int) error {
		for i := 0; i < each; i++ {
			path := fmt.Sprintf("/w%02d/n%02d", w, i)
			res, err := c.Txn(ctx, []core.Op{core.CreateOp(path, []byte(path), core.Persistent).WithParents()}, core.TxnOptions{})
			if err != nil {
				return fmt.Errorf("create %s: %w", path, err)
			}
			if len(res.Results) != 1 || res.Results[0].Path != path {
				return fmt.Errorf("create %s: got results %+v", path, res.Results)
			}
			if i%10 == 0 {
				// A refused call in the same messages as the others.
				_, err := c.Txn(ctx, []core.Op{core.CheckOp("/", core.AnyVersion), core.CreateOp("/taken", nil, core.Persistent)}, core.TxnOptions{})
				if !errors.Is(err, core.ErrNodeExists) || core.FailedOpIndex(err) != 1 {
					return fmt.Errorf("create /taken again: got %v (op index %d), want ErrNodeExists at op 1", err, core.FailedOpIndex(err))
				}
			}
		}
		return nil
	})
	for w := 0; w < writers; w++ {
		for i := 0; i < each; i++ {
			path := fmt.Sprintf("/w%02d/n%02d", w, i)
			n, err := core.Get(ctx, c, path)
			if err != nil || !bytes.Equal(n.Data, []byte(path)) {
				t.Fatalf("%s: %q, %v; want its own data", path, n.Data, err)
			}
		}
	}
	m1, n1 := plugins.TxnStreamCounts(c)
	messages, calls := m1-m0, n1-n0
	want := int64(writers * (each + each/10))
	if calls != want {
		t.Fatalf("%d calls crossed on the stream, want all %d", calls, want)
	}
	if messages >= calls {
		t.Fatalf("%d messages for %d concurrent calls: no two calls shared a message", messages, calls)
	}
	t.Logf("%d calls in %d messages", calls, messages)
}

// A caller that stops waiting gets its context's error at once, the other
// calls on the stream go on, and the plugin cancels the abandoned call: it
// never applies.
func TestTxnStreamAbandonedCallIsCancelledInThePlugin(t *testing.T) {
	p := launchMemory(t)
	slow, fast := client(t, p), client(t, p)
	fi, ok := core.Optional[core.FaultInjector](slow)
	if !ok {
		t.Fatal("the memory plugin's client is not a FaultInjector")
	}
	const latency = 2 * time.Second
	fi.SetLatency(latency)
	ctx := context.Background()

	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err := slow.Txn(short, []core.Op{core.CreateOp("/abandoned", nil, core.Persistent)}, core.TxnOptions{})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("abandoned call: %v, want context.DeadlineExceeded", err)
	}
	// The other client's calls are not held up behind it.
	if _, _, err := core.Create(ctx, fast, "/fast", nil, core.CreateOptions{}); err != nil {
		t.Fatalf("call beside the abandoned one: %v", err)
	}
	// A call on the slow client started after the abandoned one waits the
	// same latency: once it is done, the abandoned call would have been
	// applied had the plugin not cancelled it.
	long, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, _, err := core.Create(long, slow, "/after", nil, core.CreateOptions{}); err != nil {
		t.Fatalf("call after the abandoned one: %v", err)
	}
	if _, err := core.Get(ctx, fast, "/abandoned"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("the abandoned call's node: %v, want ErrNotFound (the plugin should have cancelled it)", err)
	}
}

// A plugin that does not implement TxnStream (one built before it) gets
// unary Txn calls, with the same outcomes.
func TestTxnStreamFallsBackToUnary(t *testing.T) {
	defer plugins.SetPluginTxnStreamUnimplemented(true)()
	p := connect(t, memory.NewProvider(memory.StoreOptions{}))
	c := client(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	concurrently(t, 8, func(w int) error {
		for i := 0; i < 10; i++ {
			path := fmt.Sprintf("/u%d/n%d", w, i)
			if _, err := c.Txn(ctx, []core.Op{core.CreateOp(path, nil, core.Persistent).WithParents()}, core.TxnOptions{}); err != nil {
				return fmt.Errorf("create %s: %w", path, err)
			}
		}
		return nil
	})
	if _, _, err := core.Create(ctx, c, "/u0/n0", nil, core.CreateOptions{}); !errors.Is(err, core.ErrNodeExists) {
		t.Fatalf("create an existing node: %v, want ErrNodeExists", err)
	}
	n, err := core.Get(ctx, c, "/u7/n9")
	if err != nil || n.Stat.Version != 0 {
		t.Fatalf("/u7/n9: %+v, %v", n.Stat, err)
	}
	if _, calls := plugins.TxnStreamCounts(c); calls > 8 {
		t.Fatalf("%d calls sent on a stream the plugin does not implement; want the host to stop using it after the first answer", calls)
	}
}
