package raft

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
)

// TestSoakProcessChaos (METAPLANE_SOAK=1): three voter processes under
// writers from every voter while voters are killed (SIGKILL, restarted by
// their host) or frozen (SIGSTOP/SIGCONT) at random for a minute
// (METAPLANE_SOAK_DURATION to change it); at the end every acknowledged
// write is there, once.
func TestSoakProcessChaos(t *testing.T) {
	if os.Getenv("METAPLANE_SOAK") == "" {
		t.Skip("soak test: set METAPLANE_SOAK=1")
	}
	duration := time.Minute
	if d, err := time.ParseDuration(os.Getenv("METAPLANE_SOAK_DURATION")); err == nil {
		duration = d
	}
	v := startProcs(t, 3)
	var mu sync.Mutex
	acked := map[string]bool{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			var c core.MetadataBackend
			for i := 0; ; i++ {
				select {
				case <-stop:
					if c != nil {
						c.Close()
					}
					return
				default:
				}
				if c == nil {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					nc, err := v.plugins[w].NewClient(ctx, core.ClientOptions{Name: fmt.Sprint("soak-", w)})
					cancel()
					if err != nil {
						time.Sleep(100 * time.Millisecond)
						continue
					}
					c = nc
				}
				p := fmt.Sprintf("/soak/w%d-%06d", w, i)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, _, err := core.Create(ctx, c, p, []byte(p), core.CreateOptions{MakeParents: true})
				cancel()
				if err != nil {
					c.Close()
					c = nil
					continue
				}
				mu.Lock()
				acked[p] = true
				mu.Unlock()
			}
		}(w)
	}
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	end := time.Now().Add(duration)
	for time.Now().Before(end) {
		time.Sleep(time.Duration(500+rng.Intn(1500)) * time.Millisecond)
		i := rng.Intn(3)
		if v.plugins[i].Pid() == 0 {
			continue
		}
		if rng.Intn(2) == 0 {
			pid := v.signal(i, syscall.SIGKILL)
			t.Logf("SIGKILL voter %d", i+1)
			v.waitRestarted(i, pid)
		} else {
			v.signal(i, syscall.SIGSTOP)
			t.Logf("SIGSTOP voter %d", i+1)
			time.Sleep(time.Duration(200+rng.Intn(1500)) * time.Millisecond)
			v.signal(i, syscall.SIGCONT)
		}
	}
	close(stop)
	wg.Wait()
	mu.Lock()
	want := make([]string, 0, len(acked))
	for p := range acked {
		want = append(want, p)
	}
	mu.Unlock()
	reader := v.client(0)
	ctx := testutil.Context(t, 20*time.Second)
	var names []string
	testutil.WaitFor(t, 60*time.Second, "the cluster to serve reads", func() bool {
		var err error
		names, _, err = reader.Children(ctx, "/soak", core.ReadOptions{})
		return err == nil
	})
	have := map[string]bool{}
	for _, n := range names {
		have["/soak/"+n] = true
	}
	for _, p := range want {
		if !have[p] {
			t.Fatalf("acknowledged write %s lost", p)
		}
	}
	t.Logf("%d acknowledged writes all present (%d nodes)", len(want), len(names))
}
