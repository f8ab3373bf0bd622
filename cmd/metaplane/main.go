// Command metaplane is the metaplane daemon and CLI: coordinator, tablet
// server, admin, config validation, conformance and benchmarks. See
// `metaplane help`.
package main

import (
	"os"

	"github.com/metaplane/metaplane/cmd/metaplane/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
