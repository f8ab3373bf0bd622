package config

import "github.com/metaplane/metaplane/settings"

// The value and problem types of the configuration are the shared typed
// decoder's (settings), so that a backend parsing its own flat
// settings reports problems exactly as the loader does.
type (
	// Size is a number of bytes (see settings.Size).
	Size = settings.Size
	// Problem is one thing wrong with a configuration (see settings.Problem).
	Problem = settings.Problem
	// Problems collects problems (see settings.Problems).
	Problems = settings.Problems
	// Error is a configuration that cannot be used (see settings.Error).
	Error = settings.Error
)

// The binary units of Size.
const (
	KiB = settings.KiB
	MiB = settings.MiB
	GiB = settings.GiB
	TiB = settings.TiB
)

// ParseSize parses a Size (see settings.ParseSize).
func ParseSize(s string) (Size, error) { return settings.ParseSize(s) }

// SortProblems returns a sorted copy of ps without duplicates (see
// settings.SortProblems).
func SortProblems(ps []Problem) []Problem { return settings.SortProblems(ps) }
