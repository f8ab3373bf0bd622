package settings

import (
	"fmt"
	"strconv"
	"strings"
)

// Size is a number of bytes in the configuration. It is written as plain
// bytes ("8388608") or with a binary unit: b, k/kb, m/mb, g/gb, t/tb, case
// insensitive, optionally separated by a space ("8mb", "512kb", "1gb",
// "1024 m"); 1kb = 1024 bytes.
type Size int64

// The binary units of Size.
const (
	KiB Size = 1 << 10
	MiB Size = 1 << 20
	GiB Size = 1 << 30
	TiB Size = 1 << 40
)

var sizeUnits = map[string]Size{
	"": 1, "b": 1,
	"k": KiB, "kb": KiB, "kib": KiB,
	"m": MiB, "mb": MiB, "mib": MiB,
	"g": GiB, "gb": GiB, "gib": GiB,
	"t": TiB, "tb": TiB, "tib": TiB,
}

// ParseSize parses a Size (see Size for the syntax). It refuses negative
// values, fractions, unknown units and values that overflow int64.
func ParseSize(s string) (Size, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("invalid size %q: want a whole number of bytes with an optional unit (b, kb, mb, gb, tb), e.g. 8mb", s)
	}
	unit, ok := sizeUnits[strings.TrimSpace(t[i:])]
	if !ok {
		return 0, fmt.Errorf("invalid size %q: unknown unit %q (want b, kb, mb, gb or tb)", s, strings.TrimSpace(t[i:]))
	}
	n, err := strconv.ParseInt(t[:i], 10, 64)
	if err != nil || (n != 0 && Size(n) > Size(1<<63-1)/unit) {
		return 0, fmt.Errorf("invalid size %q: too large", s)
	}
	return Size(n) * unit, nil
}

// UnmarshalText parses text with ParseSize.
func (s *Size) UnmarshalText(text []byte) error {
	v, err := ParseSize(string(text))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// MarshalText formats s as String does.
func (s Size) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// String formats s with the largest binary unit that divides it exactly
// ("8mb", "1536kb", "100"), so ParseSize(s.String()) == s.
func (s Size) String() string {
	if s != 0 {
		for _, u := range []struct {
			n    Size
			name string
		}{{TiB, "tb"}, {GiB, "gb"}, {MiB, "mb"}, {KiB, "kb"}} {
			if s%u.n == 0 {
				return strconv.FormatInt(int64(s/u.n), 10) + u.name
			}
		}
	}
	return strconv.FormatInt(int64(s), 10)
}
