package tabletserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/core"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// rpcSource feeds an image.Image from the coordinator leader's metadata
// stream: Snapshot is FetchMetadataSnapshot, Watch is a FetchMetadata long
// poll loop. Only those two methods are used by the image; the embedded
// nil interface makes every other method panic.
type rpcSource struct {
	core.MetadataBackend
	c   *adminclient.Client
	log *slog.Logger
}

func (r *rpcSource) Snapshot(ctx context.Context, prefix string) (core.Snapshot, error) {
	var resp *adminv1.FetchMetadataSnapshotResponse
	err := r.c.Tablets(ctx, func(ctx context.Context, t adminv1.TabletServerServiceClient) error {
		var err error
		resp, err = t.FetchMetadataSnapshot(ctx, &adminv1.FetchMetadataSnapshotRequest{})
		return err
	})
	if err != nil {
		return core.Snapshot{}, err
	}
	snap := core.Snapshot{Revision: resp.Offset}
	for _, n := range resp.Nodes {
		if !core.HasPrefixPath(n.Path, prefix) {
			continue
		}
		snap.Nodes = append(snap.Nodes, core.Node{Path: n.Path, Data: n.Data, Stat: core.Stat{Version: n.Version,
			CreateRevision: n.CreateOffset, ModifyRevision: n.ModifyOffset, EphemeralOwner: n.EphemeralOwner, DataLength: int32(len(n.Data))}})
	}
	return snap, nil
}

func (r *rpcSource) Watch(ctx context.Context, prefix string, from int64) (<-chan core.WatchResponse, error) {
	ch := make(chan core.WatchResponse, 1)
	go func() {
		defer close(ch)
		failures := 0
		for ctx.Err() == nil {
			var resp *adminv1.FetchMetadataResponse
			err := r.c.Tablets(ctx, func(ctx context.Context, t adminv1.TabletServerServiceClient) error {
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				var err error
				resp, err = t.FetchMetadata(cctx, &adminv1.FetchMetadataRequest{FromOffset: from})
				return err
			})
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				failures++
				if errors.Is(err, core.ErrCompacted) || failures > 5 {
					send(ctx, ch, core.WatchResponse{Err: fmt.Errorf("fetch metadata from %d: %w", from, err)})
					return
				}
				r.log.Debug("fetch metadata failed; retrying", "err", err)
				sleep(ctx, time.Duration(failures)*200*time.Millisecond)
				continue
			}
			failures = 0
			if len(resp.Records) == 0 && resp.NextOffset <= from {
				continue // the long poll ended empty
			}
			wr := core.WatchResponse{Revision: resp.NextOffset - 1}
			for _, rec := range resp.Records {
				if !core.HasPrefixPath(rec.Path, prefix) {
					continue
				}
				wr.Events = append(wr.Events, core.WatchEvent{Type: core.EventType(rec.Type), Path: rec.Path, Data: rec.Data,
					Revision: rec.Offset, Stat: core.Stat{Version: rec.Version, ModifyRevision: rec.Offset, DataLength: int32(len(rec.Data))}})
			}
			if !send(ctx, ch, wr) {
				return
			}
			from = resp.NextOffset
		}
	}()
	return ch, nil
}

func send(ctx context.Context, ch chan<- core.WatchResponse, r core.WatchResponse) bool {
	select {
	case ch <- r:
		return true
	case <-ctx.Done():
		return false
	}
}
