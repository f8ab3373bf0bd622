package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/metaplane/metaplane/plugins"
)

// Some verbs run in a helper binary installed beside metaplane, so that the
// daemon's binary links no consensus engine, store or test harness:
//
//   - metaplane-raft-offline: the offline Raft verbs, which open a stopped
//     member's data directory with the Raft engine itself;
//   - metaplane-lab: bench, demo and conformance, which start clusters of
//     their own and run the conformance suite.
//
// Each helper is the same command line with those verbs built in: the
// metaplane binary hands it its whole command line (help included), its
// standard streams and its exit status, and passes SIGINT/SIGTERM on.
const (
	HelperRaftOffline = "metaplane-raft-offline"
	HelperLab         = "metaplane-lab"
)

// helperVerb is a verb that runs in a helper binary.
type helperVerb struct {
	parent string // the command path below the root ("" for a top-level verb, "raft", "raft snapshot")
	name   string
	use    string // the verb's usage line, as its own command says it
	short  string
	binary string
}

// helperVerbs are the verbs that run in a helper binary. Their one-line
// help is here so that `metaplane --help` lists them without the helper;
// the verbs themselves (cmd/metaplane/internal/lab, raftoffline) use it too.
var helperVerbs = []helperVerb{
	{"", "bench", "bench", "measure ZooKeeper against Raft side by side (the seeds' table)", HelperLab},
	{"", "conformance", "conformance --plugin PATH", "run the backend conformance suite against a plugin binary", HelperLab},
	{"", "demo", "demo", "run three Raft coordinators and three tablet servers locally, kill the leader, then a tablet server", HelperLab},
	{"raft", "unsafe-recover", "unsafe-recover", "offline, after losing a majority for good: make the stopped member at --data-dir the only voter (--i-understand-data-loss)", HelperRaftOffline},
	{"raft", "bootstrap", "bootstrap", "offline: format the empty --data-dir as a member of a new cluster of the configured voters", HelperRaftOffline},
	{"raft snapshot", "restore", "restore FILE", "offline: make the empty --data-dir a new single-voter cluster holding FILE's tree (versions and times kept, epochs continued)", HelperRaftOffline},
}

// HelperShort is the one-line help of a verb that runs in a helper binary
// ("raft snapshot", "restore").
func HelperShort(parent, name string) string {
	for _, v := range helperVerbs {
		if v.parent == parent && v.name == name {
			return v.short
		}
	}
	panic("cli: no helper verb " + strings.TrimSpace(parent+" "+name))
}

// verbBuilders are the verbs registered below a group (RegisterVerb).
var verbBuilders = map[string][]func(*RaftFlags) *cobra.Command{}

// RegisterVerb adds a verb below the group at parent ("raft" or "raft
// snapshot"), built with the group's shared flags.
func RegisterVerb(parent string, build func(*RaftFlags) *cobra.Command) {
	verbBuilders[parent] = append(verbBuilders[parent], build)
}

// addRegisteredVerbs adds the verbs registered below parent to cmd.
func addRegisteredVerbs(cmd *cobra.Command, parent string, r *RaftFlags) {
	for _, build := range verbBuilders[parent] {
		cmd.AddCommand(build(r))
	}
}

// addHelperStubs adds, for every helper verb this binary does not hold
// itself, a verb that runs the helper.
func addHelperStubs(root *cobra.Command) {
	for _, v := range helperVerbs {
		parent := root
		if v.parent != "" {
			found, rest, err := root.Find(strings.Fields(v.parent))
			if err != nil || len(rest) != 0 {
				continue
			}
			parent = found
		}
		if hasChild(parent, v.name) {
			continue
		}
		stub := &cobra.Command{
			Use:                v.use,
			Short:              v.short,
			DisableFlagParsing: true, // the helper parses them, --help included
			RunE: func(cmd *cobra.Command, _ []string) error {
				return runHelper(cmd, v.binary)
			},
		}
		// `metaplane help raft bootstrap` shows the helper's help too.
		stub.SetHelpFunc(func(cmd *cobra.Command, _ []string) {
			if err := runHelper(cmd, v.binary); err != nil {
				if _, ok := errors.AsType[*exitStatus](err); !ok {
					fmt.Fprintln(cmd.ErrOrStderr(), operatorMessage(err))
				}
			}
		})
		parent.AddCommand(stub)
	}
}

func hasChild(c *cobra.Command, name string) bool {
	for _, sub := range c.Commands() {
		if sub.Name() == name {
			return true
		}
	}
	return false
}

// argvKey holds the command line Run was given, for runHelper.
type argvKey struct{}

// helperPath finds a helper binary: beside this executable (symbolic links
// resolved), then in $METAPLANE_BIN_DIR.
func helperPath(binary string) (string, error) {
	var looked []string
	if dir, err := plugins.DefaultDir(); err == nil {
		looked = append(looked, dir)
	}
	if dir := os.Getenv("METAPLANE_BIN_DIR"); dir != "" {
		looked = append(looked, dir)
	}
	for _, dir := range looked {
		p := filepath.Join(dir, binary)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s is not installed: looked in %s; install it beside metaplane (make build puts both in bin/)", binary, strings.Join(looked, " and "))
}

// runHelper runs the whole command line in the helper binary, with this
// process's standard streams, and ends with the helper's exit status. A
// SIGINT or SIGTERM to this process (the verb's context ending) is passed
// on as SIGINT, and the helper is waited for.
func runHelper(cmd *cobra.Command, binary string) error {
	path, err := helperPath(binary)
	if err != nil {
		return fmt.Errorf("%s runs in %w", cmd.CommandPath(), err)
	}
	ctx := cmd.Root().Context()
	argv, _ := ctx.Value(argvKey{}).([]string)
	h := exec.Command(path, argv...)
	h.Stdin, h.Stdout, h.Stderr = cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr()
	if err := h.Start(); err != nil {
		return fmt.Errorf("%s: starting %s: %w", cmd.CommandPath(), path, err)
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			_ = h.Process.Signal(os.Interrupt)
		case <-done:
		}
	}()
	err = h.Wait()
	close(done)
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			// Ended by a signal (SIGPIPE when its reader went away): end
			// as a shell reports it, with nothing to add.
			return ExitWith(128 + int(ws.Signal()))
		}
		return ExitWith(ee.ExitCode())
	}
	if err != nil {
		return fmt.Errorf("%s: %s: %w", cmd.CommandPath(), path, err)
	}
	return nil
}

// withArgv keeps the command line in ctx for runHelper.
func withArgv(ctx context.Context, args []string) context.Context {
	return context.WithValue(ctx, argvKey{}, append([]string(nil), args...))
}
