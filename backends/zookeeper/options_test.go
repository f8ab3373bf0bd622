package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metaplane/metaplane/config"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
)

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name string
		o    Options
		keys []string // every key the error must name; none: valid
	}{
		{"valid", Options{Address: "127.0.0.1:2181,zk2"}, nil},
		{"no address", Options{}, []string{"zookeeper.address"}},
		{"chroot in address", Options{Address: "zk1:2181/fluss"}, []string{"zookeeper.address"}},
		{"bad port", Options{Address: "zk1:99999"}, []string{"zookeeper.address"}},
		{"bad root", Options{Address: "zk1", Root: "fluss/"}, []string{"zookeeper.path.root"}},
		{"slash root", Options{Address: "zk1", Root: "/"}, []string{"zookeeper.path.root"}},
		{"all at once", Options{Root: "x", SessionTimeout: -1, MaxInFlightRequests: -1, MaxBufferSize: 10},
			[]string{"zookeeper.address", "zookeeper.path.root", "zookeeper.client.session-timeout", "zookeeper.client.max-inflight-requests", "zookeeper.client.max-buffer-size"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.o.Validate()
			if len(tt.keys) == 0 {
				if err != nil {
					t.Fatalf("got %v, want valid", err)
				}
				return
			}
			if err == nil {
				t.Fatal("got valid, want an error")
			}
			for _, k := range tt.keys {
				if !strings.Contains(err.Error(), k+":") {
					t.Errorf("error %q does not name %s", err, k)
				}
			}
		})
	}
}

// TestOptionsFromSettings: the settings the host sends (its defaults,
// flattened) give the documented defaults; 0 retries means none; a bad
// value is refused naming its key.
func TestOptionsFromSettings(t *testing.T) {
	cfg := config.Default()
	cfg.ZooKeeper.Address = []string{"zk1:2181", "zk2:2181"}
	o, err := OptionsFromSettings(cfg.Flatten())
	if err != nil {
		t.Fatal(err)
	}
	want := Options{
		Address: "zk1:2181,zk2:2181", Root: "/fluss", SessionTimeout: 60 * time.Second,
		ConnectionTimeout: 15 * time.Second, RetryWait: 5 * time.Second, MaxRetryAttempts: 3,
		MaxInFlightRequests: 100, MaxBufferSize: 100 << 20,
	}
	if fmt.Sprint(o) != fmt.Sprint(want) {
		t.Fatalf("got %+v\nwant %+v", o, want)
	}
	cfg.ZooKeeper.Client.MaxRetryAttempts = 0
	o, err = OptionsFromSettings(cfg.Flatten())
	if got := o.withDefaults().MaxRetryAttempts; err != nil || got != 0 {
		t.Fatalf("max-retry-attempts 0 gives %d retries (%v), want none", got, err)
	}
	_, err = OptionsFromSettings(map[string]string{"zookeeper.client.session-timeout": "60", "zookeeper.client.max-buffer-size": "lots"})
	for _, k := range []string{"zookeeper.client.session-timeout:", "zookeeper.client.max-buffer-size:"} {
		if !errors.Is(err, core.ErrInvalidArgument) || !strings.Contains(fmt.Sprint(err), k) {
			t.Errorf("bad values: got %v, want ErrInvalidArgument naming %s", err, k)
		}
	}
}

// TestOpenUnreachable: no server: Open fails with ErrUnavailable after the
// connection timeout.
func TestOpenUnreachable(t *testing.T) {
	port := testutil.FreePort(t)
	start := time.Now()
	_, err := Open(context.Background(), Options{Address: fmt.Sprintf("127.0.0.1:%d", port), ConnectionTimeout: 500 * time.Millisecond}, core.ClientOptions{})
	if !errors.Is(err, core.ErrUnavailable) || !strings.Contains(err.Error(), "connection-timeout") {
		t.Fatalf("got %v, want ErrUnavailable naming the connection timeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v", d)
	}
}

// TestProviderStart: Start validates the configuration and reaches the
// server; NewClient needs a successful Start.
func TestProviderStart(t *testing.T) {
	p := &Provider{}
	if _, err := p.NewClient(context.Background(), core.ClientOptions{}); err == nil {
		t.Fatal("NewClient before Start succeeded")
	}
	cfg := config.Default()
	if err := p.Start(context.Background(), cfg.Flatten()); err == nil || !strings.Contains(err.Error(), "zookeeper.address") {
		t.Fatalf("Start without an address: %v", err)
	}
	o := testOptions(t)
	cfg.ZooKeeper.Address = []string{o.Address}
	cfg.ZooKeeper.PathRoot = o.Root
	if err := p.Start(testutil.Context(t, 30*time.Second), cfg.Flatten()); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := p.NewClient(testutil.Context(t, 30*time.Second), core.ClientOptions{SessionTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Session().Timeout; got != 3*time.Second {
		t.Fatalf("session timeout %v, want the 3s asked for", got)
	}
	if d := p.Descriptor(); d.Name != "zookeeper" || d.SelectorKey != "zookeeper.address" || d.Deprecated == "" {
		t.Fatalf("descriptor %+v", d)
	}
	p.Close()
	if _, _, err := c.Children(context.Background(), "/", core.ReadOptions{}); !errors.Is(err, core.ErrClosed) {
		t.Fatalf("client after provider Close: %v", err)
	}
}

// TestMakeParentsRace: concurrent creates of siblings under the same
// missing parents all succeed (a parent created in between rebuilds the
// multi).
func TestMakeParentsRace(t *testing.T) {
	o := testOptions(t)
	ctx := testutil.Context(t, 30*time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := 0; i < 8; i++ {
		b := open(t, o)
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_, _, err := core.Create(ctx, b, fmt.Sprintf("/r/a/b/c/n%d", i), nil, core.CreateOptions{MakeParents: true})
			errs <- err
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("create with parents: %v", err)
		}
	}
	b := open(t, o)
	kids, _, err := b.Children(ctx, "/r/a/b/c", core.ReadOptions{})
	if err != nil || len(kids) != 8 {
		t.Fatalf("children %v %v", kids, err)
	}
}

// TestInFlightLimit: with one request in flight at a time a large batch
// still completes, in order.
func TestInFlightLimit(t *testing.T) {
	o := testOptions(t)
	o.MaxInFlightRequests = 1
	b := open(t, o)
	ctx := testutil.Context(t, 30*time.Second)
	var ops []core.Op
	var paths []string
	for i := 0; i < 50; i++ {
		p := fmt.Sprintf("/f/%02d", i)
		ops = append(ops, core.CreateOp(p, []byte(p), core.Persistent).WithParents())
		paths = append(paths, p)
	}
	if _, err := b.Txn(ctx, ops, core.TxnOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err := b.GetMany(ctx, append(paths, "/f/missing", "bad//path"), core.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range paths {
		if string(res[i].Node.Data) != p || res[i].Node.Path != p {
			t.Fatalf("result %d: %+v", i, res[i])
		}
	}
	if !errors.Is(res[50].Err, core.ErrNotFound) || !errors.Is(res[51].Err, core.ErrInvalidPath) {
		t.Fatalf("per-path errors: %v, %v", res[50].Err, res[51].Err)
	}
	if got := cap(b.sem); got != 1 {
		t.Fatalf("semaphore capacity %d", got)
	}
}
