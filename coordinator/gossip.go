package coordinator

import (
	"encoding/json"
	"sort"

	"github.com/metaplane/metaplane/adminapi"

	"github.com/metaplane/metaplane/internal/gossip"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// Gossip is the coordinators' membership gossip (an *internal/gossip.Node):
// the coordinator announces its client address and role in its member
// metadata, and lists the members it hears of in GetLeader's
// coordinators, where clients learn every coordinator from one seed.
// Gossip informs clients only: the coordinator never adds, removes or
// trusts a Raft voter, a leader or an epoch because of it.
type Gossip interface {
	// Address returns this member's gossip address, host:port.
	Address() string
	// SetMeta replaces this member's metadata (announced in the
	// background).
	SetMeta(meta []byte) error
	// Members returns the live members, this one included.
	Members() []gossip.Member
}

// gossipMeta is what a coordinator announces about itself.
type gossipMeta struct {
	ID      string `json:"id"`
	Address string `json:"address"` // client host:port, as advertised
	Role    string `json:"role"`    // "leader" or "standby"
	Epoch   int64  `json:"epoch"`   // -1 unless leader
}

const (
	roleLeader  = "leader"
	roleStandby = "standby"
)

// self describes this coordinator as it is now.
func (s *Server) self() *adminv1.CoordinatorInfo {
	c := &adminv1.CoordinatorInfo{Id: s.id, Address: adminapi.HostPort(s.addr), Role: roleStandby, Epoch: -1}
	if l := s.leader.Load(); l != nil && !l.lost() {
		c.Role, c.Epoch = roleLeader, l.lead.Epoch()
	}
	if s.opts.Gossip != nil {
		c.GossipAddress = s.opts.Gossip.Address()
	}
	return c
}

// publish announces this coordinator's current role in the gossip.
func (s *Server) publish() {
	if s.opts.Gossip == nil {
		return
	}
	c := s.self()
	b, _ := json.Marshal(gossipMeta{ID: c.Id, Address: c.Address, Role: c.Role, Epoch: c.Epoch})
	if err := s.opts.Gossip.SetMeta(b); err != nil {
		s.log.Warn("gossip: cannot announce this coordinator", "err", err)
	}
}

// coordinators lists the coordinators this one knows, itself first in its
// own current state, the rest sorted by address: the gossip's live
// members, or, without gossip, the leader it knows.
func (s *Server) coordinators(li leaderView) []*adminv1.CoordinatorInfo {
	self := s.self()
	out := []*adminv1.CoordinatorInfo{self}
	seen := map[string]bool{self.Id: true}
	if s.opts.Gossip != nil {
		for _, m := range s.opts.Gossip.Members() {
			var gm gossipMeta
			if json.Unmarshal(m.Meta, &gm) != nil || gm.ID == "" || gm.Address == "" || seen[gm.ID] {
				continue
			}
			seen[gm.ID] = true
			out = append(out, &adminv1.CoordinatorInfo{Id: gm.ID, Address: gm.Address, Role: gm.Role, Epoch: gm.Epoch, GossipAddress: m.Address})
		}
	} else if li.id != "" && !seen[li.id] && li.address != "" {
		out = append(out, &adminv1.CoordinatorInfo{Id: li.id, Address: li.address, Role: roleLeader, Epoch: li.epoch})
	}
	rest := out[1:]
	sort.Slice(rest, func(i, j int) bool { return rest[i].Address < rest[j].Address })
	return out
}

type leaderView struct {
	id, address string
	epoch       int64
}
