package plugins_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/plugins"
)

// resignMisbehaviour is how a leadership of silentProvider misbehaves.
type resignMisbehaviour int

const (
	// neverReportsLoss: Resign resigns and returns nil, but Lost is never
	// closed.
	neverReportsLoss resignMisbehaviour = iota
	// resignHangs: Resign blocks, ignoring its context, until the test
	// ends.
	resignHangs
)

// silentProvider is the memory provider whose leaderships misbehave on
// Resign.
type silentProvider struct {
	*memory.Provider
	how     resignMisbehaviour
	release chan struct{}
}

func (p *silentProvider) NewClient(ctx context.Context, opts core.ClientOptions) (core.MetadataBackend, error) {
	b, err := p.Provider.NewClient(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &silentBackend{MetadataBackend: b, p: p}, nil
}

type silentBackend struct {
	core.MetadataBackend
	p *silentProvider
}

func (b *silentBackend) Campaign(ctx context.Context, c core.Candidate) (core.Leadership, error) {
	l, err := b.MetadataBackend.Campaign(ctx, c)
	if err != nil {
		return nil, err
	}
	return &silentLeadership{Leadership: l, p: b.p, never: make(chan struct{})}, nil
}

type silentLeadership struct {
	core.Leadership
	p     *silentProvider
	never chan struct{}
}

func (l *silentLeadership) Lost() <-chan struct{} { return l.never }

func (l *silentLeadership) Resign(ctx context.Context) error {
	if l.p.how == resignHangs {
		<-l.p.release
	}
	return l.Leadership.Resign(ctx)
}

// TestResignBoundedOnMisbehavingPlugin: the host's Resign returns, with
// ErrUnavailable and Lost closed, even under a context without deadline,
// when the plugin never reports the loss or never answers.
func TestResignBoundedOnMisbehavingPlugin(t *testing.T) {
	defer plugins.SetHostResignTimeout(300 * time.Millisecond)()
	for _, tt := range []struct {
		name string
		how  resignMisbehaviour
	}{
		{"never reports the loss", neverReportsLoss},
		{"Resign hangs", resignHangs},
	} {
		t.Run(tt.name, func(t *testing.T) {
			prov := &silentProvider{Provider: memory.NewProvider(memory.StoreOptions{}), how: tt.how, release: make(chan struct{})}
			p := connect(t, prov)
			t.Cleanup(func() { close(prov.release) }) // runs first: frees the plugin's handler
			c := client(t, p)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			l, err := c.Campaign(ctx, core.Candidate{ID: "a", Address: "test://a"})
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- l.Resign(context.Background()) }()
			select {
			case err = <-done:
			case <-ctx.Done():
				t.Fatalf("Resign under a context without deadline did not return")
			}
			if !errors.Is(err, core.ErrUnavailable) {
				t.Errorf("Resign: got %v, want ErrUnavailable", err)
			}
			select {
			case <-l.Lost():
			default:
				t.Errorf("Lost not closed after a bounded Resign")
			}
		})
	}
}
