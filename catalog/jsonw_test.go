package catalog

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// TestJSONWriterStringsAsEncodingJSON checks the writer's strings against
// encoding/json without HTML escaping, the escaping the records keep: the
// plain ASCII written as it is and everything else (quotes, backslashes,
// control characters, DEL, multi-byte and invalid UTF-8, U+2028) alike.
func TestJSONWriterStringsAsEncodingJSON(t *testing.T) {
	want := func(s string) string {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		return string(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
	}
	check := func(s string) {
		t.Helper()
		var w jw
		w.str(s)
		if got := string(w.bytes()); got != want(s) {
			t.Fatalf("str(%q) = %s, encoding/json writes %s", s, got, want(s))
		}
	}
	for _, s := range []string{"", "table_seqid", "a b<c>&d", "\x7f", "\"", "\\", "\n\t\r\b\f\x00\x1f",
		"été", "\u2028\u2029", "\xff\xfe", "bucket.num", "{\"k\":1}"} {
		check(s)
	}
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte("az09 _-.:/<>&\"\\\x00\x01\x1f\x7f\x80\xc3\xa9\xe2\x80\xa8\xff")
	for range 20000 {
		b := make([]byte, r.IntN(12))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		check(string(b))
	}
}

// TestJSONWriterIntegers checks the integers the writer appends in place.
func TestJSONWriterIntegers(t *testing.T) {
	var w jw
	w.open('{')
	w.fieldInt("a", -9223372036854775808)
	w.fieldInts("b", []int32{0, -1, 2147483647})
	w.close('}')
	if got, want := string(w.bytes()), `{"a":-9223372036854775808,"b":[0,-1,2147483647]}`; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}
