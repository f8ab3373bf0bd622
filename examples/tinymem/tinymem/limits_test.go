package tinymem_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"example.com/metaplane-tinymem/tinymem"
	"github.com/metaplane/metaplane/core"
)

func started(t *testing.T, flat map[string]string) core.MetadataBackend {
	t.Helper()
	p := tinymem.NewProvider()
	if err := p.Start(context.Background(), flat); err != nil {
		t.Fatalf("start %v: %v", flat, err)
	}
	t.Cleanup(func() { p.Close() })
	c, err := p.NewClient(context.Background(), core.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestLimits: the keys that bound the plugin's memory are enforced, with
// an error naming the key, and a refused write changes nothing.
func TestLimits(t *testing.T) {
	ctx := context.Background()

	c := started(t, map[string]string{"tinymem.max-nodes": "3"})
	for _, p := range []string{"/a", "/b"} {
		if _, _, err := core.Create(ctx, c, p, nil, core.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", p, err)
		}
	}
	_, _, err := core.Create(ctx, c, "/c", nil, core.CreateOptions{})
	if !errors.Is(err, core.ErrTooLarge) || !strings.Contains(err.Error(), "tinymem.max-nodes=3") {
		t.Errorf("a fourth node: got %v, want ErrTooLarge naming tinymem.max-nodes", err)
	}
	if _, ok, _ := core.Exists(ctx, c, "/c"); ok {
		t.Errorf("the refused node exists")
	}

	c = started(t, map[string]string{"tinymem.max-bytes": "1mb"})
	if _, _, err := core.Create(ctx, c, "/big", make([]byte, core.DefaultMaxValueSize), core.CreateOptions{}); err != nil {
		t.Fatalf("create 1 MiB: %v", err)
	}
	_, _, err = core.Create(ctx, c, "/one", []byte{1}, core.CreateOptions{})
	if !errors.Is(err, core.ErrTooLarge) || !strings.Contains(err.Error(), "tinymem.max-bytes=1048576") {
		t.Errorf("one byte more: got %v, want ErrTooLarge naming tinymem.max-bytes", err)
	}
	if _, err := core.Set(ctx, c, "/big", nil, core.AnyVersion, core.Fence{}); err != nil {
		t.Fatalf("shrink: %v", err)
	}
	if _, _, err := core.Create(ctx, c, "/one", []byte{1}, core.CreateOptions{}); err != nil {
		t.Errorf("after freeing the bytes: %v", err)
	}

	c = started(t, map[string]string{"tinymem.history": "2"})
	var first int64
	for i, p := range []string{"/x", "/y", "/z"} {
		_, st, err := core.Create(ctx, c, p, nil, core.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = st.CreateRevision
		}
	}
	if _, err := c.Watch(ctx, "/", first); !errors.Is(err, core.ErrCompacted) {
		t.Errorf("watch from the first of three revisions with tinymem.history=2: got %v, want ErrCompacted", err)
	}

	for key, bad := range map[string]string{"tinymem.max-nodes": "0", "tinymem.max-bytes": "1kb", "tinymem.history": "x"} {
		err := tinymem.NewProvider().Start(ctx, map[string]string{key: bad})
		if !errors.Is(err, core.ErrInvalidArgument) || !strings.Contains(err.Error(), key) {
			t.Errorf("%s=%s: got %v, want ErrInvalidArgument naming the key", key, bad, err)
		}
	}
}

// TestCampaignEndsWithTheSession: a candidate waiting behind a leader
// returns ErrSessionExpired when its session expires, and ErrClosed when
// its client closes, instead of waiting for its context.
func TestCampaignEndsWithTheSession(t *testing.T) {
	ctx := context.Background()
	p := tinymem.NewProvider()
	if err := p.Start(ctx, nil); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	leader, _ := p.NewClient(ctx, core.ClientOptions{})
	if _, err := leader.Campaign(ctx, core.Candidate{ID: "leader"}); err != nil {
		t.Fatal(err)
	}
	for _, end := range []struct {
		name string
		want error
		do   func(core.MetadataBackend)
	}{
		{"expiry", core.ErrSessionExpired, func(c core.MetadataBackend) { c.(core.SessionExpirer).ExpireSession(ctx) }},
		{"close", core.ErrClosed, func(c core.MetadataBackend) { c.Close() }},
	} {
		c, _ := p.NewClient(ctx, core.ClientOptions{})
		errc := make(chan error, 1)
		go func() { _, err := c.Campaign(ctx, core.Candidate{ID: end.name}); errc <- err }()
		// Wait until the candidacy is queued behind the leader.
		for deadline := time.Now().Add(5 * time.Second); ; {
			st, err := leader.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.Details["candidates"] == "2" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the candidacy never queued: %v", st.Details)
			}
			time.Sleep(time.Millisecond)
		}
		end.do(c)
		select {
		case err := <-errc:
			if !errors.Is(err, end.want) {
				t.Errorf("%s of a waiting candidate: got %v, want %v", end.name, err, end.want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s of a waiting candidate: Campaign still waiting", end.name)
		}
		c.Close()
	}
}
