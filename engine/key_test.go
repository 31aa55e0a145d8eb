package engine

import (
	"context"
	"testing"
)

func TestKeyValues(t *testing.T) {
	n := NewKey[int]("n")
	other := NewKey[int]("n") // same name, another declaration: another value
	meet := NewKey[*int]("m").Meet()
	stubbed := NewKey[string]("s").Stub(func(p Probe) string { return p.Route.String() })
	r := NewRun(context.Background(), &Request{Route: RouteChat}, nil)

	if v, ok := n.Get(r); ok || v != 0 {
		t.Fatalf("unset: %v %v", v, ok)
	}
	n.Set(r, 7)
	if v, ok := n.Get(r); !ok || v != 7 || n.Value(r) != 7 {
		t.Fatalf("set: %v %v", v, ok)
	}
	if _, ok := other.Get(r); ok {
		t.Fatal("a key's value leaked to another declaration of the same name")
	}
	made := 0
	mk := func() *int { made++; return new(int) }
	a, b := meet.GetOrMake(r, mk), meet.GetOrMake(r, mk)
	if a != b || made != 1 {
		t.Fatalf("GetOrMake made %d values", made)
	}
	if c := meet.GetOrMakeIn(r, "node-1", mk); c == a || made != 2 {
		t.Fatal("a scope shares the unscoped value")
	}
	if !meet.meet() || n.meet() {
		t.Fatal("Meet flag")
	}
	stubbed.stub(r, Probe{Route: RouteGenerate})
	n.stub(r, Probe{}) // no stub: untouched
	if stubbed.Value(r) != "generate" || n.Value(r) != 7 {
		t.Fatalf("stub: %q %d", stubbed.Value(r), n.Value(r))
	}
	if !hasKey([]AnyKey{KeyMedia, other}, n) || hasKey([]AnyKey{KeyMedia}, n) {
		t.Fatal("hasKey compares names")
	}
}

// BenchmarkKeys is what one prefill → decode run does with keys: a handoff
// set and read, a per-node scoped value made and found again.
func BenchmarkKeys(b *testing.B) {
	kv := NewKey[struct {
		ran    bool
		params []byte
	}]("kv")
	tried := NewKey[*[]string]("tried")
	req := &Request{Route: RouteChat}
	b.ReportAllocs()
	for b.Loop() {
		r := NewRun(context.Background(), req, nil)
		kv.Set(r, struct {
			ran    bool
			params []byte
		}{ran: true})
		_ = kv.Value(r).ran
		mk := func() *[]string { return new([]string) }
		_ = tried.GetOrMakeIn(r, "decode/-1", mk)
		_ = tried.GetOrMakeIn(r, "decode/-1", mk)
	}
}
