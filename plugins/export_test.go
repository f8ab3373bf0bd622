package plugins

import (
	"context"
	"time"

	"github.com/metaplane/metaplane/core"
	pb "github.com/metaplane/metaplane/proto/metaplane/v1"
)

// SetHostResignTimeout sets the bound of the host's waits in Resign for
// one test; the returned function restores it.
func SetHostResignTimeout(d time.Duration) (restore func()) {
	old := hostResignTimeout
	hostResignTimeout = d
	return func() { hostResignTimeout = old }
}

// WithoutAutoMTLS returns o with go-plugin's automatic mTLS turned off
// (the plugin-boundary benchmark's comparison).
func WithoutAutoMTLS(o LaunchOptions) LaunchOptions {
	o.noAutoMTLS = true
	return o
}

// PumpWatch is the server's coalescing watch pump (pumpWatch).
func PumpWatch(ctx context.Context, ch <-chan core.WatchResponse, send func(*pb.WatchResponse) error) error {
	return pumpWatch(ctx, ch, send)
}

// WatchMergeEvents and WatchMergeBytes are the bounds of one coalesced
// watch message.
const (
	WatchMergeEvents = watchMergeEvents
	WatchMergeBytes  = watchMergeBytes
)

// OnWatchMessage makes f see every watch message the plugin server sends
// (in-process servers: this process's); the returned function removes it.
func OnWatchMessage(f func(*pb.WatchResponse)) (restore func()) {
	watchMessageHook.Store(&f)
	return func() { watchMessageHook.Store(nil) }
}
