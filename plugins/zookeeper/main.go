// Command metaplane-backend-zookeeper is the ZooKeeper backend
// (deprecated) as a plugin process. Point it at an ensemble with
// zookeeper.address; see docs/zookeeper.md.
package main

import (
	"github.com/metaplane/metaplane/backends/zookeeper"
	"github.com/metaplane/metaplane/plugins"
)

func main() { plugins.Serve(&zookeeper.Provider{}) }
