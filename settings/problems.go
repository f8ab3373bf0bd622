package settings

import (
	"sort"
	"strconv"
	"strings"
)

// Problem is one thing wrong with a configuration: the key at fault (or, for
// an environment variable that names no key, the variable; "" for a
// problem with a whole source, such as an unreadable file) and what is
// wrong with it.
type Problem struct {
	Key     string `json:"key"`
	Message string `json:"message"`
}

// String formats the problem as "key: message" (just the message when Key
// is empty).
func (p Problem) String() string {
	if p.Key == "" {
		return p.Message
	}
	return p.Key + ": " + p.Message
}

// Problems collects configuration problems. The zero value is ready to use.
type Problems []Problem

// Add appends a problem.
func (ps *Problems) Add(key, message string) {
	*ps = append(*ps, Problem{Key: key, Message: message})
}

// Err returns nil when there is no problem, else a *Error holding a
// sorted copy of the problems without duplicates.
func (ps Problems) Err() error {
	if len(ps) == 0 {
		return nil
	}
	return &Error{Problems: SortProblems(ps)}
}

// SortProblems returns a copy of ps sorted by key, then message, with exact
// duplicates removed.
func SortProblems(ps []Problem) []Problem {
	out := append([]Problem(nil), ps...)
	sort.Slice(out, func(i, j int) bool {
		if out[i].Key != out[j].Key {
			return out[i].Key < out[j].Key
		}
		return out[i].Message < out[j].Message
	})
	dedup := out[:0]
	for i, p := range out {
		if i > 0 && p == out[i-1] {
			continue
		}
		dedup = append(dedup, p)
	}
	return dedup
}

// Error is a configuration that cannot be used: every problem found,
// sorted by key then message. The configuration loader (config),
// its selector and the backends parsing their own settings return it.
type Error struct {
	Problems []Problem
}

// Error lists the problems, one per line after the first line.
func (e *Error) Error() string {
	if len(e.Problems) == 1 {
		return "config: " + e.Problems[0].String()
	}
	var b strings.Builder
	b.WriteString("config: ")
	b.WriteString(strconv.Itoa(len(e.Problems)))
	b.WriteString(" problems:")
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}
