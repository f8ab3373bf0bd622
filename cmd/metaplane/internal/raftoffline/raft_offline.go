// Package raftoffline holds the offline Raft verbs (raft bootstrap, raft
// unsafe-recover, raft snapshot restore): they open a stopped member's data
// directory with the Raft engine itself, so they run in the helper binary
// metaplane-raft-offline, never in metaplane's own.
package raftoffline

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/metaplane/metaplane/backends/raft"
	"github.com/metaplane/metaplane/cmd/metaplane/internal/cli"
)

// survivorReport is one survivor's figures in `raft unsafe-recover`'s answer.
type survivorReport struct {
	DataDir      string `json:"data_dir"`
	NodeID       uint64 `json:"node_id"`
	Address      string `json:"address"`
	Term         uint64 `json:"term"`
	AppliedIndex uint64 `json:"applied_index"`
	CommitIndex  uint64 `json:"commit_index"`
	LastIndex    uint64 `json:"last_index"`
}

// recoverReport is `raft unsafe-recover`'s answer.
type recoverReport struct {
	DataDir   string `json:"data_dir"`
	NodeID    uint64 `json:"node_id"`
	Address   string `json:"address"`
	ClusterID string `json:"cluster_id"`
	Term      uint64 `json:"term"`
	// AppliedIndex is what the recovered member holds; entries after it
	// (up to LastIndex) are discarded.
	AppliedIndex uint64 `json:"applied_index"`
	CommitIndex  uint64 `json:"commit_index"`
	LastIndex    uint64 `json:"last_index"`
	Discarded    uint64 `json:"discarded_entries"`
	// Survivors: this member, then each --survivor-dir.
	Survivors []survivorReport `json:"survivors"`
	// Pick is the node id of the survivor to recover on (the highest
	// applied index); Behind how many entries this member applied fewer.
	Pick   uint64 `json:"pick"`
	Behind uint64 `json:"behind"`
	// Removed are the members dropped from the membership ("id@host:port").
	Removed   []string `json:"removed"`
	Rewritten bool     `json:"rewritten"`
}

func (rep *recoverReport) loss(w io.Writer) {
	fmt.Fprintf(w, "member %d at %s (cluster %s, term %d): applied index %d, commit index %d, last log index %d\n",
		rep.NodeID, rep.Address, rep.ClusterID, rep.Term, rep.AppliedIndex, rep.CommitIndex, rep.LastIndex)
	if len(rep.Survivors) > 1 {
		for _, sv := range rep.Survivors[1:] {
			fmt.Fprintf(w, "survivor member %d at %s (%s, term %d): applied index %d, commit index %d, last log index %d\n",
				sv.NodeID, sv.Address, sv.DataDir, sv.Term, sv.AppliedIndex, sv.CommitIndex, sv.LastIndex)
		}
		if rep.Behind == 0 {
			fmt.Fprintf(w, "pick: member %d (this one): no survivor given applied more\n", rep.NodeID)
		} else {
			fmt.Fprintf(w, "pick: member %d: it applied %d entries more than this member; run unsafe-recover there, not here\n", rep.Pick, rep.Behind)
		}
	}
	fmt.Fprintf(w, "kept: every entry up to index %d (what this member applied)\n", rep.AppliedIndex)
	fmt.Fprintf(w, "lost: the %d entries of this member's log after index %d, and every write the removed members committed that this member never received\n",
		rep.Discarded, rep.AppliedIndex)
	fmt.Fprintf(w, "removed from the membership (their ids cannot be reused): %s\n", strings.Join(rep.Removed, ", "))
}

func raftUnsafeRecover(r *cli.RaftFlags) *cobra.Command {
	var understood, dryRun bool
	var survivorDirs, survivorReports []string
	var forceLagging uint64
	cmd := &cobra.Command{Use: "unsafe-recover", Args: cli.NoArgs,
		Short: cli.HelperShort("raft", "unsafe-recover"),
		Long: `unsafe-recover rewrites the membership of one surviving member (its
coordinator stopped) to that member alone, so that it starts as a
single-voter quorum holding every entry it had applied; then add new voters
with add-voter. Run it on the most up-to-date survivor: give every other
survivor's data directory (stopped, written on this host) with
--survivor-dir, or the file its own --dry-run --json wrote on its host
with --survivor-report. It reads each (changing nothing there), prints
every survivor's term, applied, commit and last log index and which one to
pick, and refuses to rewrite a member that applied fewer entries than
another survivor unless --force-lagging N names that loss (N, the number
of entries). Entries in its log after its applied index, and writes the
lost members committed that it never received, are lost. It refuses while
a leader answers (the quorum is not lost: use remove-voter), while a
process holds DIR or a survivor's directory, and without
--i-understand-data-loss. Never run it on more than one survivor of the same cluster.`}
	of := addOfflineFlags(cmd)
	f := cmd.Flags()
	f.BoolVar(&understood, "i-understand-data-loss", false, "confirm that writes this member never applied are lost for good")
	f.BoolVar(&dryRun, "dry-run", false, "read the member's state (and every --survivor-dir's) and say what would be kept and lost and which survivor to pick, changing nothing")
	f.StringArrayVar(&survivorDirs, "survivor-dir", nil, "another surviving member's stopped data `DIR` on this host, compared with this member (repeat for each survivor)")
	f.StringArrayVar(&survivorReports, "survivor-report", nil, "the `FILE` another survivor's `unsafe-recover --dry-run --json` wrote on its own host, compared with this member (repeat for each survivor)")
	f.Uint64Var(&forceLagging, "force-lagging", 0, "rewrite this member although another survivor applied `N` entries more (N must be the loss the refusal names)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if !understood && !dryRun {
			return cli.UsageError("unsafe-recover discards every write this member did not apply and drops the other members for good: pass --i-understand-data-loss to go ahead (or --dry-run to see what would be lost)")
		}
		o, err := of.options(cmd)
		if err != nil {
			return err
		}
		reported, err := readSurvivorReports(survivorReports)
		if err != nil {
			return err
		}
		res, err := raft.UnsafeRecover(cmd.Context(), o, raft.RecoverOptions{Rewrite: !dryRun, SurvivorDirs: survivorDirs, Survivors: reported, ForceLagging: forceLagging})
		rep := &recoverReport{DataDir: of.dataDir, NodeID: res.NodeID, Address: res.Address, ClusterID: fmt.Sprint(res.ClusterID),
			Term: res.Term, AppliedIndex: res.AppliedIndex, CommitIndex: res.CommitIndex, LastIndex: res.LastIndex,
			Survivors: []survivorReport{}, Pick: res.Pick.NodeID, Behind: res.Behind, Removed: []string{}, Rewritten: res.Rewritten}
		if res.LastIndex > res.AppliedIndex {
			rep.Discarded = res.LastIndex - res.AppliedIndex
		}
		for _, sv := range res.Survivors {
			rep.Survivors = append(rep.Survivors, survivorReport{DataDir: sv.Dir, NodeID: sv.NodeID, Address: sv.Address, Term: sv.Term,
				AppliedIndex: sv.AppliedIndex, CommitIndex: sv.CommitIndex, LastIndex: sv.LastIndex})
		}
		for _, v := range res.Removed {
			rep.Removed = append(rep.Removed, fmt.Sprintf("%d@%s", v.ID, v.Address))
		}
		if err != nil {
			return offlineErr(err)
		}
		if r.JSON() {
			return r.PrintJSON(cmd.OutOrStdout(), rep)
		}
		w := cmd.OutOrStdout()
		rep.loss(w)
		if dryRun {
			fmt.Fprintln(w, "dry run: nothing was changed")
			return nil
		}
		fmt.Fprintf(w, "membership rewritten: member %d is the only voter. Start its coordinator (keep coordinator.raft.voters as it was: the cluster id derives from it), then add voters with `metaplane raft add-voter` (new ids)\n", rep.NodeID)
		return nil
	}
	return cmd
}

// readSurvivorReports reads the members' own figures from the
// `unsafe-recover --dry-run --json` answers in files.
func readSurvivorReports(files []string) ([]raft.Survivor, error) {
	var out []raft.Survivor
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, cli.UsageError("--survivor-report: %v", err)
		}
		var rep recoverReport
		if json.Unmarshal(b, &rep) != nil || rep.NodeID == 0 || rep.ClusterID == "" {
			return nil, cli.UsageError("--survivor-report %s is not the --json answer of `metaplane raft unsafe-recover --dry-run` (no node_id and cluster_id)", file)
		}
		cid, err := strconv.ParseUint(rep.ClusterID, 10, 64)
		if err != nil {
			return nil, cli.UsageError("--survivor-report %s: cluster_id %q: %v", file, rep.ClusterID, err)
		}
		out = append(out, raft.Survivor{Dir: file, NodeID: rep.NodeID, Address: rep.Address, ClusterID: cid, Term: rep.Term,
			AppliedIndex: rep.AppliedIndex, CommitIndex: rep.CommitIndex, LastIndex: rep.LastIndex})
	}
	return out, nil
}

// bootstrapReport is `raft bootstrap`'s answer.
type bootstrapReport struct {
	DataDir   string   `json:"data_dir"`
	ClusterID string   `json:"cluster_id"`
	NodeID    uint64   `json:"node_id"`
	Voters    []string `json:"voters"`
	// Skipped: --skip-formatted found the directory already formatted
	// and changed nothing.
	Skipped bool `json:"skipped,omitempty"`
	// DiskWarning: the directory's free space is below
	// coordinator.raft.disk.min-free (the member starts paused).
	DiskWarning string `json:"disk_warning,omitempty"`
}

func raftBootstrap(r *cli.RaftFlags) *cobra.Command {
	cmd := &cobra.Command{Use: "bootstrap", Args: cli.NoArgs,
		Short: cli.HelperShort("raft", "bootstrap"),
		Long: `bootstrap writes the cluster id and the initial voter set
(coordinator.raft.voters, this member coordinator.raft.node.id) into an
empty coordinator.raft.dir, refusing a directory that is not empty, a node
id missing from the voters and two voters sharing an address. Run it on
every initial voter with the same voters; each coordinator then starts from
its formatted directory. A coordinator with more than one voter refuses
to start on an unformatted directory and names this command; a single
voter formats its empty directory on first start. --skip-formatted makes
it safe to run before every start (a Kubernetes init container, a systemd
ExecStartPre): a directory that already holds a formatted member (a
cluster id and Raft state) is left as it is, exit 0.`}
	of := addOfflineFlags(cmd)
	var skip bool
	cmd.Flags().BoolVar(&skip, "skip-formatted", false, "exit 0 changing nothing when --data-dir already holds a formatted member (a cluster id and Raft state); any other non-empty directory is still refused")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		o, err := of.options(cmd)
		if err != nil {
			return err
		}
		if skip {
			cid, ok, err := raft.Formatted(of.dataDir)
			if err != nil {
				return err
			}
			if ok {
				rep := bootstrapReport{DataDir: of.dataDir, ClusterID: fmt.Sprint(cid), NodeID: o.NodeID, Voters: []string{}, Skipped: true}
				if r.JSON() {
					return r.PrintJSON(cmd.OutOrStdout(), rep)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s already holds a formatted member of cluster %s: nothing changed\n", of.dataDir, rep.ClusterID)
				return nil
			}
		}
		res, err := raft.Bootstrap(cmd.Context(), o)
		if err != nil {
			return offlineErr(err)
		}
		rep := bootstrapReport{DataDir: of.dataDir, ClusterID: fmt.Sprint(res.ClusterID), NodeID: res.NodeID, DiskWarning: res.DiskWarning}
		if res.DiskWarning != "" {
			fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", res.DiskWarning)
		}
		for _, v := range res.Voters {
			rep.Voters = append(rep.Voters, fmt.Sprintf("%d@%s", v.ID, v.Address))
		}
		if r.JSON() {
			return r.PrintJSON(cmd.OutOrStdout(), rep)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "formatted %s as member %d of new cluster %s with %d voters: %s\n",
			of.dataDir, rep.NodeID, rep.ClusterID, len(rep.Voters), strings.Join(rep.Voters, ", "))
		return nil
	}
	return cmd
}
