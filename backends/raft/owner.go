package raft

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/metaplane/metaplane/core"
)

// memberFile, in coordinator.raft.dir, records the member id and the
// Raft address the directory was formatted for (bootstrap, snapshot
// restore, a first start). Directories from before it have none and are
// checked against Dragonboat's own record instead.
const memberFile = "member"

// ErrWrongAddress is wrapped by the refusal to start a member under
// another id or Raft address than its directory was formatted for.
var ErrWrongAddress = errors.New("raft: data directory formatted for another member address")

// memberRecord is memberFile's content.
type memberRecord struct {
	NodeID  uint64 `json:"node_id"`
	Address string `json:"address"`
}

// readMemberRecord reads dir's record; ok false when it has none.
func readMemberRecord(dir string) (rec memberRecord, ok bool, err error) {
	p := filepath.Join(dir, memberFile)
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return rec, false, nil
	}
	if err != nil {
		return rec, false, fmt.Errorf("coordinator.raft.dir: %w", err)
	}
	if err := json.Unmarshal(b, &rec); err != nil || rec.NodeID == 0 || rec.Address == "" {
		return rec, false, fmt.Errorf("%w: %s is damaged (want the member id and Raft address the directory was formatted for)", core.ErrInvalidArgument, p)
	}
	return rec, true, nil
}

// writeMemberRecord records in dir that it belongs to member id at addr,
// unless it already holds a record.
func writeMemberRecord(dir string, id uint64, addr string) error {
	if _, ok, err := readMemberRecord(dir); ok || err != nil {
		return err
	}
	b, _ := json.Marshal(memberRecord{NodeID: id, Address: addr})
	p := filepath.Join(dir, memberFile)
	if err := writeFileSync(p+".tmp", append(b, '\n')); err != nil {
		return fmt.Errorf("coordinator.raft.dir: %w", err)
	}
	if err := os.Rename(p+".tmp", p); err != nil {
		return fmt.Errorf("coordinator.raft.dir: %w", err)
	}
	return nil
}

// checkOwner refuses, before Dragonboat opens dir, to run member id at
// addr on a directory formatted for another id or address (memberFile;
// for an older directory without it, the address in Dragonboat's record),
// naming both and the way out. A directory with neither record passes.
func checkOwner(dir string, id uint64, addr string) error {
	rec, ok, err := readMemberRecord(dir)
	if err != nil {
		return err
	}
	if !ok {
		if _, err := os.Stat(filepath.Join(dir, nodeHostDir, "dragonboat.ds")); err != nil {
			return nil
		}
		a, err := ownerAddress(dir)
		if err != nil {
			return err
		}
		rec = memberRecord{NodeID: id, Address: a}
	}
	sameAddr := strings.EqualFold(strings.TrimSpace(rec.Address), strings.TrimSpace(addr))
	if rec.NodeID == id && sameAddr {
		return nil
	}
	if rec.NodeID != id {
		return fmt.Errorf("%w: coordinator.raft.dir %s belongs to member %d at %s, but coordinator.raft.node.id is %d (at %s): "+
			"start this directory as member %d with its entry %d@%s in coordinator.raft.voters, or give member %d an empty directory",
			ErrWrongAddress, dir, rec.NodeID, rec.Address, id, addr, rec.NodeID, rec.NodeID, rec.Address, id)
	}
	return fmt.Errorf("%w: coordinator.raft.dir %s belongs to member %d at Raft address %s, but the configuration gives it %s "+
		"(its entry in coordinator.raft.voters, with coordinator.raft.port): a member's Raft address cannot change; "+
		"start it with %d@%s in coordinator.raft.voters (and coordinator.raft.port to match), "+
		"or, to move it to %s, remove member %d with remove-voter and add a new member there with an empty directory",
		ErrWrongAddress, dir, id, rec.Address, addr, id, rec.Address, addr, id)
}
