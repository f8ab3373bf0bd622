package raft

import "github.com/metaplane/metaplane/core"

func optionsFromConfig(cfg *core.Config) (Options, error) {
	return Options{}, nil
}
