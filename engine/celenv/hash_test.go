package celenv

import (
	"hash/fnv"
	"net/http"
	"strings"
	"testing"
)

// The golden values pin hash() and bucket() forever: a workflow's sticky
// split must keep every user on the same side across versions, replicas
// and architectures (docs/workflow-reference.md, Stable hashing). If this
// test fails, the implementation changed, not the goldens.
var hashGoldens = []struct {
	s      string
	fnv    uint64
	hash   int64
	mod100 int64
	mod7   int64
}{
	{"", 0xcbf29ce484222325, 5472609002491880229, 37, 2}, // FNV-1a 64's offset basis
	{"a", 0xaf63dc4c8601ec8c, 3414815163700866188, 96, 5},
	{"foobar", 0x85944171f73967e8, 402018224477661160, 68, 6},
	{"user-42", 0x32c6d7a54d35dacb, 3658848852250057419, 19, 2},
	{"alice@example.com", 0x67023fc4a7ff2a46, 7422565249724656198, 98, 6},
	{"héllo", 0xa35ff71f960240e0, 2549027629147767008, 16, 4},
	{"日本", 0x121d7e35a6d3ce91, 1305338235904577169, 69, 1},
}

func TestHashGoldens(t *testing.T) {
	for _, g := range hashGoldens {
		if got := Fnv1a64(g.s); got != g.fnv {
			t.Errorf("fnv(%q) = %#x, want %#x", g.s, got, g.fnv)
		}
		// The standard library's FNV-1a agrees (the definition, not a copy).
		h := fnv.New64a()
		h.Write([]byte(g.s))
		if h.Sum64() != g.fnv {
			t.Errorf("hash/fnv(%q) = %#x, golden %#x", g.s, h.Sum64(), g.fnv)
		}
		if got := Hash(g.s); got != g.hash || got < 0 {
			t.Errorf("hash(%q) = %d, want %d", g.s, got, g.hash)
		}
		for _, c := range []struct{ n, want int64 }{{100, g.mod100}, {7, g.mod7}, {1, 0}} {
			if got, ok := Bucket(g.s, c.n); !ok || got != c.want {
				t.Errorf("bucket(%q, %d) = %d, %v; want %d", g.s, c.n, got, ok, c.want)
			}
		}
	}
}

// Through CEL: the functions are registered with their types, in guards
// and in admission priorities, and bucket's n < 1 is an evaluation error.
func TestHashInCEL(t *testing.T) {
	e := testEnv(t)
	a := e.NewActivation(3)
	a.Request = Request{Format: "chat", Header: http.Header{"X-User": {"user-42"}}}
	tests := []struct {
		src     string
		want    bool
		evalErr string
	}{
		{`hash("foobar") == 402018224477661160`, true, ""},
		{`bucket(request.headers[?"x-user"].orValue(""), 100) == 19`, true, ""},
		{`bucket(request.headers[?"x-user"].orValue(""), 100) < 10`, false, ""},
		{`bucket(request.headers[?"x-absent"].orValue(""), 100) == 37`, true, ""}, // absent: hash of ""
		{`hash(request.headers[?"x-user"].orValue("")) >= 0`, true, ""},
		{`bucket("a", 0) == 0`, false, "needs n >= 1, got 0"},
		{`bucket("a", -5) == 0`, false, "needs n >= 1, got -5"},
	}
	for _, tc := range tests {
		x, iss := e.Compile(tc.src, Guard)
		if iss != nil {
			t.Fatalf("%s: %+v", tc.src, iss)
		}
		got, err := x.Bool(a)
		if tc.evalErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.evalErr) {
				t.Errorf("%s: err %v, want %q", tc.src, err, tc.evalErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s = %v, %v; want %v", tc.src, got, err, tc.want)
		}
	}
	for _, src := range []string{`hash(1) == 0`, `bucket("a") == 0`, `bucket("a", 1.5) == 0`} {
		if _, iss := e.Compile(src, Guard); len(iss) == 0 || !strings.Contains(iss[0].Msg, "no matching overload") {
			t.Errorf("%s: %+v", src, iss)
		}
	}
	p, iss := CompilePriority(`"x-user" in request.headers ? bucket(request.headers["x-user"], 100) : 0`)
	if iss != nil {
		t.Fatalf("priority: %+v", iss)
	}
	if n, err := p.Eval(&Request{Header: http.Header{"X-User": {"user-42"}}}); err != nil || n != 19 {
		t.Fatalf("priority = %d, %v", n, err)
	}
}

// The cost model charges hashing by the bytes hashed: a header value (up
// to 8 KiB) costs more than a literal, and both stay far from the limit.
func TestHashCost(t *testing.T) {
	e := testEnv(t)
	lit, iss := e.Compile(`hash("foobar") > 0`, Guard)
	if iss != nil {
		t.Fatal(iss)
	}
	hdr, iss := e.Compile(`hash(request.headers[?"x-user"].orValue("")) > 0`, Guard)
	if iss != nil {
		t.Fatal(iss)
	}
	if lit.CostMax >= hdr.CostMax || hdr.CostMax < hashCost(maxValueLen) || hdr.CostMax > CostLimit {
		t.Fatalf("estimates: literal %d, header %d (hashing 8 KiB: %d)", lit.CostMax, hdr.CostMax, hashCost(maxValueLen))
	}
}

// go test -bench Bucket ./engine/celenv/: a sticky split by a 36-byte
// header value, evaluated through CEL.
func BenchmarkBucket(b *testing.B) {
	e, err := NewEnv(nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	x, iss := e.Compile(`bucket(request.headers[?"x-user"].orValue(""), 100) < 10`, Guard)
	if iss != nil {
		b.Fatal(iss)
	}
	a := e.NewActivation(0)
	a.Request = Request{Format: "chat", Header: http.Header{"X-User": {"0b7e5d4c-1f0a-4d1e-9f7c-3a2b1c0d9e8f"}}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := x.Bool(a); err != nil {
			b.Fatal(err)
		}
	}
}
