package settings

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestReaderDecodesAndCollects: every typed getter decodes its syntax,
// leaves a field alone when the key is absent or empty, and every bad value
// becomes one problem naming its key.
func TestReaderDecodesAndCollects(t *testing.T) {
	r := NewReader(map[string]string{
		"a.dur": "1500ms", "a.int": " 42 ", "a.u": "7", "a.bool": "true", "a.size": "8mb", "a.list": "x, y",
		"a.str": " s ", "a.empty": "",
		"b.dur": "5", "b.int": "four", "b.u": "-1", "b.bool": "yes please", "b.size": "1 parsec", "b.list": "x,,y",
	})
	var (
		d          = time.Hour
		i          = -1
		u          uint64
		b          bool
		s          Size
		l          []string
		str, empty = "", "default"
	)
	r.Duration("a.dur", &d)
	r.Int("a.int", &i)
	r.Uint64("a.u", &u)
	r.Bool("a.bool", &b)
	r.Size("a.size", &s)
	r.List("a.list", &l)
	r.String("a.str", &str)
	r.String("a.empty", &empty)
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if d != 1500*time.Millisecond || i != 42 || u != 7 || !b || s != 8*MiB || strings.Join(l, "|") != "x|y" || str != "s" || empty != "default" {
		t.Fatalf("got %v %d %d %v %d %q %q %q", d, i, u, b, s, l, str, empty)
	}
	var i64 int64
	r.Duration("b.dur", &d)
	r.Int64("b.int", &i64)
	r.Uint64("b.u", &u)
	r.Bool("b.bool", &b)
	r.Size("b.size", &s)
	r.List("b.list", &l)
	r.Duration("absent", &d)
	var ce *Error
	if err := r.Err(); !errors.As(err, &ce) || len(ce.Problems) != 6 {
		t.Fatalf("got %v, want six problems", err)
	}
	for k, frag := range map[string]string{"b.dur": "with a unit", "b.int": "whole number", "b.u": "negative", "b.bool": "true or false", "b.size": "unknown unit", "b.list": "empty"} {
		found := false
		for _, p := range ce.Problems {
			found = found || p.Key == k && strings.Contains(p.Message, frag)
		}
		if !found {
			t.Errorf("no problem for %s containing %q in %v", k, frag, ce.Problems)
		}
	}
	if d != 1500*time.Millisecond || u != 7 {
		t.Errorf("a bad value changed its field: %v %d", d, u)
	}
}

func TestFormatDurationRoundTrips(t *testing.T) {
	for _, d := range []time.Duration{500 * time.Millisecond, 30 * time.Second, time.Minute, 1500 * time.Microsecond, 7} {
		back, err := ParseDuration(FormatDuration(d))
		if err != nil || back != d {
			t.Errorf("%v -> %q -> %v, %v", d, FormatDuration(d), back, err)
		}
	}
}

func TestParseHostPort(t *testing.T) {
	if h, p, err := ParseHostPort("[::1]:9124", false); err != nil || h != "::1" || p != 9124 {
		t.Errorf("got %q %d %v", h, p, err)
	}
	for _, s := range []string{"h", ":1", "h:0", "h:70000", "a b:1"} {
		if _, _, err := ParseHostPort(s, false); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
	if _, _, err := ParseHostPort("h:0", true); err != nil {
		t.Errorf("port 0 with allowZero: %v", err)
	}
}

// TestParseUintWholeRange: an unsigned key takes every uint64 (a Raft
// cluster id is a random 64-bit number), and says why it refuses the rest.
func TestParseUintWholeRange(t *testing.T) {
	for s, want := range map[string]uint64{"0": 0, " 17820187087881251998 ": 17820187087881251998, "18446744073709551615": 1<<64 - 1} {
		if got, err := ParseUint(s); err != nil || got != want {
			t.Errorf("ParseUint(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for s, frag := range map[string]string{"-1": "must not be negative", "18446744073709551616": "too large (at most 18446744073709551615)", "1e3": "whole number", "": "whole number"} {
		if _, err := ParseUint(s); err == nil || !strings.Contains(err.Error(), frag) {
			t.Errorf("ParseUint(%q): %v, want an error containing %q", s, err, frag)
		}
	}
}
