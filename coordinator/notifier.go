package coordinator

import (
	"context"
	"crypto/sha256"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/metaplane/metaplane/adminclient"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// notifyTablets sends every registered tablet server the LeaderAndIsr of
// the buckets it replicates, carrying the leader's epoch
// (NotifyLeaderAndIsr), when it leads and whenever those change. A server
// that refuses (a newer coordinator told it a higher epoch) makes this
// leader stop notifying it. Best effort: failures are retried on the next
// change or after a few seconds.
func (s *Server) notifyTablets(ctx context.Context, l *leaderState) {
	conns := map[string]*grpc.ClientConn{}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	sent := map[int32][32]byte{}
	retry := time.NewTicker(3 * time.Second)
	defer retry.Stop()
	for {
		build := s.notifyOnce(ctx, l, conns, sent)
		select {
		case <-ctx.Done():
			return
		case <-l.buckets.wake:
			// Only a change under /tabletservers wakes it (see
			// bucketStates). Debounce: a DDL is many events. A round
			// decodes the bucket records that changed and regroups
			// every bucket by server, so under a stream of DDLs on a
			// large catalog the rounds are spaced by notifyPacing
			// times what the last one took to build: the notifier's
			// share of the leader's CPU stays bounded instead of
			// taking it from the DDLs themselves.
			t := time.NewTimer(min(max(notifyDebounce, notifyPacing*build), notifyMaxPause))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		case <-retry.C:
		}
	}
}

// The notifier's rounds follow a change after notifyDebounce, or
// notifyPacing times the last round's build time when that is longer, but
// never more than notifyMaxPause.
const (
	notifyDebounce = 100 * time.Millisecond
	notifyPacing   = 20
	notifyMaxPause = 2 * time.Second
)

// notifyOnce runs one round: it brings the bucket states up to date,
// groups them by server and sends each registered server its buckets when
// they changed since the last round. It returns
// how long the build took (without the sends).
func (s *Server) notifyOnce(ctx context.Context, l *leaderState, conns map[string]*grpc.ClientConn, sent map[int32][32]byte) time.Duration {
	start := time.Now()
	servers, err := l.cat.ListTabletServers(ctx)
	if err != nil {
		return time.Since(start)
	}
	if err := l.buckets.refresh(ctx, l.cat, l.img); err != nil {
		return time.Since(start)
	}
	per := l.buckets.perServer()
	var sending time.Duration // the rounds' RPCs, not part of the build
	live := map[int32]bool{}
	for _, ts := range servers {
		live[ts.ID] = true
		req := &adminv1.NotifyLeaderAndIsrRequest{CoordinatorEpoch: l.lead.Epoch(), CoordinatorId: s.id, Buckets: per[ts.ID]}
		b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(req)
		sum := sha256.Sum256(append(b, []byte(ts.Registration.Listeners)...))
		if prev, ok := sent[ts.ID]; ok && prev == sum {
			continue
		}
		addr := adminclient.HostPort(ts.Registration.Listeners)
		cc, ok := conns[addr]
		if !ok {
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
			if d := adminclient.DetailOf(err); d != nil && d.Code == adminclient.CodeInvalidCoordinator {
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
	return time.Since(start) - sending
}

// tabletDialOptions are how the leader dials a tablet service: over TLS
// with Options.TabletTLS and its password when given, else plaintext.
func (s *Server) tabletDialOptions() []grpc.DialOption {
	if s.opts.TabletTLS == nil {
		return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(s.opts.TabletTLS))}
	if s.opts.TabletUsername != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(adminclient.PasswordCredentials(s.opts.TabletUsername, s.opts.TabletPassword)))
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
