// Package lab holds the verbs that start clusters of their own or run the
// conformance suite (bench, demo, conformance): they link the Raft engine,
// ZooKeeper test servers and the testing package, so they run in the
// helper binary metaplane-lab, never in metaplane's own.
package lab

import (
	"github.com/metaplane/metaplane/cmd/metaplane/internal/cli"
	"github.com/metaplane/metaplane/conformance"
)

func init() { cli.RegisterSentinels(conformance.ErrInterrupted, conformance.ErrNotLinearizable) }
