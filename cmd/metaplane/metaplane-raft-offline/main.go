// Command metaplane-raft-offline is the metaplane command line with the
// offline Raft verbs built in (raft bootstrap, raft unsafe-recover, raft
// snapshot restore), which open a stopped member's data directory with
// the Raft engine. metaplane runs it for those verbs, so that the daemon's
// binary links no consensus engine or store; it is installed beside
// metaplane.
package main

import (
	"os"

	"github.com/metaplane/metaplane/cmd/metaplane/internal/cli"
	_ "github.com/metaplane/metaplane/cmd/metaplane/internal/raftoffline" // raft bootstrap, unsafe-recover, snapshot restore
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
