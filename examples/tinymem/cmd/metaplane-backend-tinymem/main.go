// Command metaplane-backend-tinymem is the tinymem backend as a metaplane
// plugin: the whole main of a third-party backend.
package main

import (
	"example.com/metaplane-tinymem/tinymem"
	"github.com/metaplane/metaplane/plugins"
)

func main() { plugins.Serve(tinymem.NewProvider()) }
