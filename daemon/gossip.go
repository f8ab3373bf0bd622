package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/metaplane/metaplane/adminapi"
	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/config"
	"github.com/metaplane/metaplane/internal/gossip"
)

// startGossip starts the coordinators' gossip (coordinator.gossip.enabled)
// on coordinator.gossip.port, TCP and UDP, at bindHost (the host of the
// client listener). It joins through coordinator.seed.nodes: each seed
// other than this coordinator (advertised) is asked for the gossip
// addresses it knows (GetLeader's coordinators), and seed-host:port is
// tried as well, for coordinators that all use the same gossip port. It
// returns a nil node when gossip is off: then nothing listens on the
// port. stop leaves the gossip and releases the port; banner says where it
// listens and whether it is encrypted.
func startGossip(cfg *config.Config, id, bindHost, advertised string, logger *slog.Logger) (n *gossip.Node, stop func(), banner string, err error) {
	g := cfg.Coordinator.Gossip
	if !g.Enabled {
		return nil, func() {}, "", nil
	}
	key, err := cfg.GossipKey()
	if err != nil {
		return nil, nil, "", fmt.Errorf("coordinator.gossip.encryption-key: %w", err)
	}
	var seeds []string
	for _, s := range cfg.Coordinator.SeedNodes {
		if adminapi.HostPort(s) != advertised {
			seeds = append(seeds, adminapi.HostPort(s))
		}
	}
	tlsConf, err := coordinatorClientTLS(cfg)
	if err != nil {
		return nil, nil, "", err
	}
	var ask *adminclient.Client
	if len(seeds) > 0 {
		if ask, err = adminclient.NewClientWithOptions(seeds, adminclient.Options{TLS: tlsConf}); err != nil {
			return nil, nil, "", err
		}
	}
	resolve := func(ctx context.Context) []string {
		var out []string
		for _, s := range seeds {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			r, err := ask.GetLeaderFrom(cctx, s)
			cancel()
			if err == nil {
				for _, c := range r.Coordinators {
					if c.GossipAddress != "" {
						out = append(out, c.GossipAddress)
					}
				}
			}
			if h, _, err := net.SplitHostPort(s); err == nil {
				out = append(out, net.JoinHostPort(h, strconv.Itoa(g.Port)))
			}
		}
		return out
	}
	n, err = gossip.Start(gossip.Options{Name: id, BindAddr: bindHost, Port: g.Port, Key: key, Seeds: resolve, Logger: logger})
	if err != nil {
		if ask != nil {
			ask.Close()
		}
		return nil, nil, "", fmt.Errorf("coordinator.gossip.port: %w", err)
	}
	enc := "encrypted"
	if key == nil {
		enc = "unencrypted: see coordinator.gossip.encryption-key"
	}
	stop = func() {
		if err := n.Close(2 * time.Second); err != nil {
			logger.Debug("gossip: leaving did not complete", "err", err)
		}
		if ask != nil {
			ask.Close()
		}
	}
	return n, stop, fmt.Sprintf("%s (tcp+udp, %s)", n.Address(), enc), nil
}
