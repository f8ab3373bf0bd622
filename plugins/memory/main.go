// Command metaplane-backend-memory is the in-memory reference backend as a
// plugin process: the example a third-party backend's main copies.
package main

import (
	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/plugins"
)

func main() { plugins.Serve(memory.NewProvider(memory.StoreOptions{})) }
