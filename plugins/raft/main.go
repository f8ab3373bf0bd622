// Command metaplane-backend-raft is the Raft backend as a plugin process: it
// runs this coordinator's voter (a Dragonboat NodeHost on
// coordinator.raft.port, the Pebble state machine under
// coordinator.raft.dir) and serves clients of it to metaplane.
package main

import (
	"github.com/metaplane/metaplane/backends/raft"
	"github.com/metaplane/metaplane/plugins"
)

func main() { plugins.Serve(&raft.Provider{}) }
