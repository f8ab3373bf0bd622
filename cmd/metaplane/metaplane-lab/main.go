// Command metaplane-lab is the metaplane command line with the verbs that
// start clusters of their own or run the conformance suite built in
// (bench, demo, conformance). metaplane runs it for those verbs, so that
// the daemon's binary links none of what they need; it is installed
// beside metaplane.
package main

import (
	"os"

	"github.com/metaplane/metaplane/cmd/metaplane/internal/cli"
	_ "github.com/metaplane/metaplane/cmd/metaplane/internal/lab" // bench, demo, conformance
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
