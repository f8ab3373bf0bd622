// Package settings is the typed decoder of flat settings: the map of
// dotted keys to string values ("coordinator.raft.election.timeout" ->
// "1s") that the host hands a backend's Provider.Start, the same map that
// crosses the plugin wire. The configuration loader (config) and every
// backend, built in or third party, parse values with it, so a value means
// the same thing and a bad one is reported the same way everywhere.
//
// It imports the standard library only, like core.
package settings

import (
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"
)

// Reader decodes keys of one settings map into typed fields, collecting a
// Problem for every value that does not parse (the key named, with what
// was wanted). A key that is absent or empty leaves the field unchanged,
// so a caller fills defaults before or after reading. A Reader is not safe
// for concurrent use; the map is not modified.
type Reader struct {
	m     map[string]string
	probs Problems
}

// NewReader returns a Reader of m.
func NewReader(m map[string]string) *Reader { return &Reader{m: m} }

// Err returns nil when every value read so far parsed, else a *Error
// listing every problem.
func (r *Reader) Err() error { return r.probs.Err() }

// Problems returns the problems found so far (the caller owns the slice).
func (r *Reader) Problems() []Problem { return append([]Problem(nil), r.probs...) }

// Has reports whether key is set to a non-empty value.
func (r *Reader) Has(key string) bool { return strings.TrimSpace(r.m[key]) != "" }

// raw returns key's trimmed value and whether it is set.
func (r *Reader) raw(key string) (string, bool) {
	v := strings.TrimSpace(r.m[key])
	return v, v != ""
}

func (r *Reader) fail(key string, err error) { r.probs.Add(key, err.Error()) }

// read parses key's value with parse into dst, or records the problem; an
// absent or empty key leaves dst alone.
func read[T any](r *Reader, key string, dst *T, parse func(string) (T, error)) {
	v, ok := r.raw(key)
	if !ok {
		return
	}
	x, err := parse(v)
	if err != nil {
		r.fail(key, err)
		return
	}
	*dst = x
}

// String reads key as is (trimmed).
func (r *Reader) String(key string, dst *string) {
	read(r, key, dst, func(s string) (string, error) { return s, nil })
}

// Duration reads key with ParseDuration.
func (r *Reader) Duration(key string, dst *time.Duration) { read(r, key, dst, ParseDuration) }

// Int reads key with ParseInt, refusing a value that does not fit an int.
func (r *Reader) Int(key string, dst *int) {
	read(r, key, dst, func(s string) (int, error) {
		n, err := ParseInt(s)
		if err == nil && int64(int(n)) != n {
			err = fmt.Errorf("invalid integer %q: too large", s)
		}
		return int(n), err
	})
}

// Int64 reads key with ParseInt.
func (r *Reader) Int64(key string, dst *int64) { read(r, key, dst, ParseInt) }

// Uint64 reads key with ParseUint: any whole number from 0 to 2^64-1.
func (r *Reader) Uint64(key string, dst *uint64) { read(r, key, dst, ParseUint) }

// Bool reads key with ParseBool.
func (r *Reader) Bool(key string, dst *bool) { read(r, key, dst, ParseBool) }

// Size reads key with ParseSize.
func (r *Reader) Size(key string, dst *Size) { read(r, key, dst, ParseSize) }

// List reads key with ParseList.
func (r *Reader) List(key string, dst *[]string) { read(r, key, dst, ParseList) }

// ParseDuration parses a duration with a unit ("500ms", "1s", "2m").
func ParseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: want a number with a unit, e.g. 500ms, 1s, 2m", s)
	}
	return d, nil
}

// ParseBool parses true or false (and the other spellings of
// strconv.ParseBool).
func ParseBool(s string) (bool, error) {
	b, err := strconv.ParseBool(strings.TrimSpace(s))
	if err != nil {
		return false, fmt.Errorf("invalid boolean %q: want true or false", s)
	}
	return b, nil
}

// ParseInt parses a whole decimal number that fits in an int64.
func ParseInt(s string) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid integer %q: want a whole number", s)
	}
	return n, nil
}

// ParseUint parses a whole decimal number from 0 to 2^64-1 (a Raft cluster
// id takes the whole range).
func ParseUint(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	n, err := strconv.ParseUint(t, 10, 64)
	if err == nil {
		return n, nil
	}
	if strings.HasPrefix(t, "-") {
		if _, ierr := strconv.ParseInt(t, 10, 64); ierr == nil {
			return 0, fmt.Errorf("invalid value %s: must not be negative", t)
		}
	}
	if errors.Is(err, strconv.ErrRange) {
		return 0, fmt.Errorf("invalid integer %q: too large (at most %d)", s, uint64(math.MaxUint64))
	}
	return 0, fmt.Errorf("invalid integer %q: want a whole number", s)
}

// ParseList parses a comma-separated list. Entries are trimmed; an empty
// entry is an error; a wholly empty value is the empty list.
func ParseList(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return []string{}, nil
	}
	parts := strings.Split(s, ",")
	out := make([]string, 0, len(parts))
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			return nil, fmt.Errorf("entry %d of the list is empty", i+1)
		}
		out = append(out, p)
	}
	return out, nil
}

// FormatDuration writes d in its largest exact unit ("500ms", "30s",
// "1m"), which ParseDuration reads back.
func FormatDuration(d time.Duration) string {
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}, {time.Microsecond, "us"}} {
		if d != 0 && d%u.d == 0 {
			return strconv.FormatInt(int64(d/u.d), 10) + u.name
		}
	}
	return d.String()
}

// ParseHostPort parses host:port with a port in 1..65535 (0 too when
// allowZero). Errors say what is wrong with s.
func ParseHostPort(s string, allowZero bool) (string, int, error) {
	host, portStr, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, fmt.Errorf("address %q: want host:port", s)
	}
	if host == "" {
		return "", 0, fmt.Errorf("address %q: empty host", s)
	}
	if strings.ContainsAny(host, " /@,\t") {
		return "", 0, fmt.Errorf("address %q: invalid host %q", s, host)
	}
	port, err := strconv.Atoi(portStr)
	lo := 1
	if allowZero {
		lo = 0
	}
	if err != nil || port < lo || port > 65535 {
		return "", 0, fmt.Errorf("address %q: port %q is not in %d..65535", s, portStr, lo)
	}
	return host, port, nil
}
