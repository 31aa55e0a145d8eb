package mm

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// tokenArray is a render-style token_ids array of n ids spread over the
// vocabulary (1 to 6 digits, as a real prompt's are).
func tokenArray(n int) []byte {
	b := make([]byte, 0, 7*n+2)
	b = append(b, '[')
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(i*7919%151000), 10)
	}
	return append(b, ']')
}

// The one-loop parser must give the same ids and the same messages as the
// element-by-element reading it replaced. ACCEPTANCE 101
func TestParseTokenIDsEdges(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int64
		err  string // substring of the error; "" = success
	}{
		{in: `[0]`, want: []int64{0}},
		{in: "[\n\t1 ,\r2\n]", want: []int64{1, 2}},
		{in: `[1,2,3]  `, want: []int64{1, 2, 3}},
		{in: `[9223372036854775807,0]`, want: []int64{9223372036854775807, 0}},
		{in: `[00012]`, want: []int64{12}}, // leading zeros: read as before (invalid JSON never gets here)
		{in: `[9223372036854775808]`, err: "[0]: integer 9223372036854775808 is out of range"},
		{in: `[1,99999999999999999999]`, err: "[1]: integer 99999999999999999999 is out of range"},
		{in: `[1,123456789012345678901234567890]`, err: "[1]: integer 123456789012345678901234… is out of range"},
		{in: `[1,-2]`, err: "[1]: must be a non-negative integer, got -2"},
		{in: `[1.0]`, err: "[0]: must be a non-negative integer, got 1.0"},
		{in: `[7,1e19]`, err: "[1]: must be a non-negative integer, got 1e19"},
		{in: `[1E2]`, err: "[0]: must be a non-negative integer, got 1E2"},
		{in: `[1,"2"]`, err: "[1]: must be a non-negative integer, got string"},
		{in: `[true]`, err: "[0]: must be a non-negative integer, got true"},
		{in: `[null]`, err: "[0]: must be a non-negative integer, got null"},
		{in: `[[1]]`, err: "[0]: must be a non-negative integer, got array"},
		{in: `[{"a":1}]`, err: "[0]: must be a non-negative integer, got object"},
		{in: `[]`, err: "got []"},
		{in: `[ ]`, err: "got []"},
		{in: `{}`, err: "got object"},
		{in: ``, err: "got nothing"},
		{in: `[1,2`, err: "must be an array: malformed JSON"},
		{in: `[1,`, err: "must be an array"},
		{in: `[1 2]`, err: "must be an array"},
		{in: `[1,,2]`, err: "must be an array"},
	} {
		ids, err := ParseTokenIDs([]byte(tc.in))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseTokenIDs(%q) = %v, %v; want error containing %q", tc.in, ids, err, tc.err)
			}
			continue
		}
		if err != nil || len(ids) != len(tc.want) || cap(ids) > len(tc.want)+1 {
			t.Errorf("ParseTokenIDs(%q) = %v (cap %d), %v; want %v", tc.in, ids, cap(ids), err, tc.want)
			continue
		}
		for i := range ids {
			if ids[i] != tc.want[i] {
				t.Errorf("ParseTokenIDs(%q)[%d] = %d, want %d", tc.in, i, ids[i], tc.want[i])
			}
		}
	}
}

func TestParseTokenIDsLarge(t *testing.T) {
	raw := tokenArray(50000)
	ids, err := ParseTokenIDs(raw)
	if err != nil || len(ids) != 50000 {
		t.Fatalf("%d ids, %v", len(ids), err)
	}
	for i, v := range ids {
		if want := int64(i * 7919 % 151000); v != want {
			t.Fatalf("[%d] = %d, want %d", i, v, want)
		}
	}
	if got := AppendTokenIDs(nil, ids); string(got) != string(raw) {
		t.Fatal("ids do not re-encode to the input")
	}
}

// The fast loop accepts exactly what the element-by-element reading
// accepts, with the same ids: checked on random arrays of digits, separators
// and the characters of other JSON types (fixed seed, bounded count).
func TestParseTokenIDsFastAgrees(t *testing.T) {
	const alphabet = "0123456789000,,, \n[]-.eE\"tn{}"
	r := rand.New(rand.NewPCG(7, 11))
	accepted := 0
	for range 20000 {
		b := []byte{'['}
		for range r.IntN(12) {
			b = append(b, alphabet[r.IntN(len(alphabet))])
		}
		if r.IntN(2) == 0 {
			b = append(b, ']')
		}
		fast, ok := parseTokenIDsFast(b)
		slow, err := parseTokenIDsSlow(b)
		// Ids here are too short for the one case the fast path declines
		// although valid (19 digits), so the two must agree exactly.
		if ok != (err == nil) {
			t.Fatalf("%q: fast %v ok=%v, slow %v err=%v", b, fast, ok, slow, err)
		}
		if ok {
			accepted++
			if !slices.Equal(fast, slow) {
				t.Fatalf("%q: fast %v, slow %v", b, fast, slow)
			}
		}
	}
	if accepted < 100 {
		t.Fatalf("only %d random arrays accepted: the test exercises too little", accepted)
	}
}

// A 200 KB prompt rendered is about 50k ids.
func BenchmarkParseTokenIDs50k(b *testing.B) {
	raw := tokenArray(50000)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseTokenIDs(raw); err != nil {
			b.Fatal(err)
		}
	}
}
