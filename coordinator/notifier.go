package coordinator

import (
	"context"
	"crypto/sha256"
	"strconv"
	"strings"
	"time"

	"github.com/metaplane/metaplane/adminapi"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/metaplane/metaplane/catalog"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// The notifier's rounds follow a change after notifyDebounce, or
// notifyPacing times the last round's build time when that is longer, but
// never more than notifyMaxPause (see controlLoop).
const (
	notifyDebounce = 100 * time.Millisecond
	notifyPacing   = 20
	notifyMaxPause = 2 * time.Second
)

// notifyServers is the notifier's part of a controller round: it sends
// every registered tablet server the LeaderAndIsr of every bucket whose
// ISR names it (NotifyLeaderAndIsr, carrying the leader's epoch), when
// that list changed since it was last sent; a server whose list lost a
// bucket learns it no longer leads or follows it. A server that refuses
// (a newer coordinator told it a higher epoch) makes this leader stop
// notifying it. Best effort: failures are retried in the next round. The
// bucket states must be current (refreshed by the round). It returns how
// long the sends took.
func (s *Server) notifyServers(ctx context.Context, l *leaderState, servers []catalog.TabletServerInfo,
	conns map[string]*grpc.ClientConn, sent map[int32][32]byte) time.Duration {
	per := l.buckets.perServer()
	var sending time.Duration
	live := map[int32]bool{}
	for _, ts := range servers {
		live[ts.ID] = true
		req := &adminv1.NotifyLeaderAndIsrRequest{CoordinatorEpoch: l.lead.Epoch(), CoordinatorId: s.id, Buckets: per[ts.ID]}
		b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(req)
		// A new registration (a restarted server, another owner) is told
		// its buckets again, even when they are the same.
		sum := sha256.Sum256(append(b, []byte(ts.Registration.Listeners+"@"+strconv.FormatInt(ts.Owner, 10))...))
		if prev, ok := sent[ts.ID]; ok && prev == sum {
			continue
		}
		addr := adminapi.HostPort(ts.Registration.Listeners)
		cc, ok := conns[addr]
		if !ok {
			var err error
			cc, err = grpc.NewClient(addr, s.tabletDialOptions()...)
			if err != nil {
				continue
			}
			conns[addr] = cc
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		sendStart := time.Now()
		_, err := adminv1.NewTabletServiceClient(cc).NotifyLeaderAndIsr(cctx, req)
		sending += time.Since(sendStart)
		cancel()
		if err != nil {
			if d := adminapi.DetailOf(err); d != nil && d.Code == adminapi.CodeInvalidCoordinator {
				s.log.Warn("tablet server refused this coordinator's epoch: a newer leader exists", "tablet_server", ts.ID,
					"epoch", l.lead.Epoch(), "tablet_epoch", d.CoordinatorEpoch)
				sent[ts.ID] = sum
			}
			continue
		}
		sent[ts.ID] = sum
	}
	for id := range sent {
		if !live[id] {
			delete(sent, id)
		}
	}
	return sending
}

// tabletDialOptions are how the leader dials a tablet service: over TLS
// with Options.TabletTLS and its password when given, else plaintext.
func (s *Server) tabletDialOptions() []grpc.DialOption {
	if s.opts.TabletTLS == nil {
		return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(s.opts.TabletTLS))}
	if s.opts.TabletUsername != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(adminapi.PasswordCredentials(s.opts.TabletUsername, s.opts.TabletPassword)))
	}
	return opts
}

// parseLeaderIsrPath parses /tabletservers/tables/<t>/buckets/<b>/leader_isr
// and /tabletservers/partitions/<p>/buckets/<b>/leader_isr. For a
// partition the table id is not in the path: it is returned as -1.
func parseLeaderIsrPath(p string) (tableID, partitionID int64, bucket int32, ok bool) {
	if !strings.HasSuffix(p, "/leader_isr") {
		return 0, 0, 0, false
	}
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	if len(parts) != 6 || parts[0] != "tabletservers" || parts[3] != "buckets" || parts[5] != "leader_isr" {
		return 0, 0, 0, false
	}
	id, err1 := strconv.ParseInt(parts[2], 10, 64)
	b, err2 := strconv.ParseInt(parts[4], 10, 32)
	if err1 != nil || err2 != nil {
		return 0, 0, 0, false
	}
	switch parts[1] {
	case "tables":
		return id, -1, int32(b), true
	case "partitions":
		return -1, id, int32(b), true
	}
	return 0, 0, 0, false
}
