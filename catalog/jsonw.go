package catalog

import (
	"bytes"
	"encoding/json"
	"sort"
	"strconv"
)

// jw writes JSON objects field by field, in the order the original system
// writes them. It escapes strings as the original's JSON library does (no
// HTML escaping of <, > and &).
type jw struct {
	buf   bytes.Buffer
	first []bool // per open object/array: no element written yet
}

func (w *jw) open(c byte) {
	w.buf.WriteByte(c)
	w.first = append(w.first, true)
}

func (w *jw) close(c byte) {
	w.buf.WriteByte(c)
	w.first = w.first[:len(w.first)-1]
}

func (w *jw) sep() {
	n := len(w.first) - 1
	if n >= 0 {
		if !w.first[n] {
			w.buf.WriteByte(',')
		}
		w.first[n] = false
	}
}

func (w *jw) key(k string) {
	w.sep()
	w.str(k)
	w.buf.WriteByte(':')
	// the value that follows must not write a separator
	w.first = append(w.first, true)
}

// val marks the end of a key's value.
func (w *jw) val() { w.first = w.first[:len(w.first)-1] }

// str writes s as a JSON string. Every key and almost every value is
// printable ASCII with no quote or backslash, which JSON writes as it is;
// any other string goes through encoding/json, whose escaping is the one
// kept (a new encoder per string was nearly a tenth of a createTable's
// CPU in the coordinator: BenchmarkCreateTable).
func (w *jw) str(s string) {
	if plainJSON(s) {
		w.buf.WriteByte('"')
		w.buf.WriteString(s)
		w.buf.WriteByte('"')
		return
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	w.buf.Write(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
}

// plainJSON reports whether s is written in JSON as it is, between quotes:
// every byte printable ASCII (DEL included, as encoding/json leaves it)
// other than a quote or a backslash.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

func (w *jw) fieldStr(k, v string) { w.key(k); w.str(v); w.val() }

func (w *jw) fieldInt(k string, v int64) {
	w.key(k)
	w.buf.Write(strconv.AppendInt(w.buf.AvailableBuffer(), v, 10))
	w.val()
}

// fieldDouble writes a float as Java writes a double: always with a
// fraction ("8.0", not "8").
func (w *jw) fieldDouble(k string, v float64) {
	w.key(k)
	s := strconv.FormatFloat(v, 'f', -1, 64)
	if !bytes.ContainsAny([]byte(s), ".eE") {
		s += ".0"
	}
	w.buf.WriteString(s)
	w.val()
}

func (w *jw) fieldBool(k string, v bool) {
	w.key(k)
	w.buf.WriteString(strconv.FormatBool(v))
	w.val()
}

func (w *jw) fieldStrings(k string, v []string) {
	w.key(k)
	w.open('[')
	for _, s := range v {
		w.sep()
		w.str(s)
	}
	w.close(']')
	w.val()
}

func (w *jw) fieldInts(k string, v []int32) {
	w.key(k)
	w.ints(v)
	w.val()
}

func (w *jw) ints(v []int32) {
	w.open('[')
	for _, n := range v {
		w.sep()
		w.buf.Write(strconv.AppendInt(w.buf.AvailableBuffer(), int64(n), 10))
	}
	w.close(']')
}

// fieldStrMap writes a string map with sorted keys (always present, {} when
// empty).
func (w *jw) fieldStrMap(k string, m map[string]string) {
	w.key(k)
	w.open('{')
	keys := make([]string, 0, len(m))
	for key := range m {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		w.fieldStr(key, m[key])
	}
	w.close('}')
	w.val()
}

// fieldBuckets writes a bucket -> replicas map with keys in numeric order,
// as the original writes its integer-keyed maps.
func (w *jw) fieldBuckets(k string, m map[int32][]int32) {
	w.key(k)
	w.open('{')
	for _, b := range sortedKeys(m) {
		w.key(strconv.FormatInt(int64(b), 10))
		w.ints(m[b])
		w.val()
	}
	w.close('}')
	w.val()
}

func (w *jw) fieldRaw(k string, raw []byte) {
	w.key(k)
	w.buf.Write(raw)
	w.val()
}

func (w *jw) bytes() []byte { return w.buf.Bytes() }

func sortedKeys[V any](m map[int32]V) []int32 {
	keys := make([]int32, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	return keys
}

func parseBuckets(raw map[string][]int32, what string) (map[int32][]int32, error) {
	out := make(map[int32][]int32, len(raw))
	for k, v := range raw {
		n, err := strconv.ParseInt(k, 10, 32)
		if err != nil {
			return nil, formatError(what, "bucket key %q is not an integer", k)
		}
		if v == nil {
			v = []int32{}
		}
		out[int32(n)] = v
	}
	return out, nil
}
