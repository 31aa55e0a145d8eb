package ec

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

func raw(s string) json.RawMessage { return json.RawMessage(s) }

// ACCEPTANCE 160
func TestLookup(t *testing.T) {
	for name, want := range map[string]string{"": SharedStorage, SharedStorage: SharedStorage, NIXL: NIXL} {
		c, err := Lookup(name)
		if err != nil || c.Name() != want {
			t.Errorf("Lookup(%q) = %v, %v", name, c, err)
		}
	}
	for _, bad := range []string{"ec-mooncake", "nixl", "EC-NIXL"} {
		if _, err := Lookup(bad); err == nil {
			t.Errorf("Lookup(%q): want error", bad)
		}
	}
}

// ACCEPTANCE 163
func TestSharedStorageRecordsNothing(t *testing.T) {
	c, _ := Lookup(SharedStorage)
	rec := c.Merge([]Params{{"h0": raw(`{"peer_host":"a"}`)}})
	if rec != nil {
		t.Fatalf("recorded %s", rec)
	}
	p, err := c.Prepare(raw(`{"h0":{}}`))
	if p != nil || err != nil {
		t.Fatalf("Prepare = %v, %v", p, err)
	}
}

// ACCEPTANCE 161, 123, 164
func TestNIXLMerge(t *testing.T) {
	c, _ := Lookup(NIXL)
	d0 := `{"peer_host":"10.0.0.1","peer_port":5501,"size_bytes":2359296}`
	d0r := `{"size_bytes":2359296.0,"peer_port":5501,"peer_host":"10.0.0.1"}` // same value, other order/spelling
	d1 := `{"peer_host":"10.0.0.2","peer_port":5502}`
	for _, tc := range []struct {
		name    string
		replies []Params
		want    Params // nil: omitted
	}{
		{"before any encode", nil, nil},
		{"every encoder without params", []Params{nil, {}, nil}, nil},
		{"two replies", []Params{{"h0": raw(d0)}, {"h1": raw(d1)}}, Params{"h0": raw(d0), "h1": raw(d1)}},
		{"identical duplicates", []Params{{"h0": raw(d0)}, {"h0": raw(d0r)}}, Params{"h0": raw(d0)}},
		{"multi-key reply", []Params{{"h0": raw(d0), "h1": raw(d1)}}, Params{"h0": raw(d0), "h1": raw(d1)}},
		{"null descriptor dropped", []Params{{"h": raw(`null`)}, {"h1": raw(d1)}}, Params{"h1": raw(d1)}},
		{"only null", []Params{{"h": raw(`null`)}}, nil},
		{"scalar passes through", []Params{{"h": raw(`"blob"`)}, {"k": raw(`42`)}}, Params{"h": raw(`"blob"`), "k": raw(`42`)}},
		{"partial reply", []Params{nil, {"h1": raw(d1)}}, Params{"h1": raw(d1)}},
	} {
		rec := c.Merge(tc.replies)
		got, err := c.Prepare(rec)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %v want %v (record %s)", tc.name, got, tc.want, rec)
		}
	}
}

// ACCEPTANCE 161: defensive copies; preparing twice gives equal, fresh maps.
func TestNIXLPrepareFresh(t *testing.T) {
	c, _ := Lookup(NIXL)
	in := Params{"h0": raw(`{"a":1}`)}
	rec := c.Merge([]Params{in})
	in["h0"][2] = 'X' // the caller mutating its reply must not reach the record
	a, _ := c.Prepare(rec)
	b, _ := c.Prepare(rec)
	if !reflect.DeepEqual(a, b) || string(a["h0"]) != `{"a":1}` {
		t.Fatalf("a=%s b=%s", a["h0"], b["h0"])
	}
	a["h0"][2] = 'Z'
	a["new"] = raw(`1`)
	if string(b["h0"]) != `{"a":1}` || len(b) != 1 {
		t.Fatalf("maps share memory: %v", b)
	}
	if again, _ := c.Prepare(rec); string(again["h0"]) != `{"a":1}` {
		t.Fatalf("record changed: %s", again["h0"])
	}
}

// ACCEPTANCE 162
func TestNIXLConflict(t *testing.T) {
	c, _ := Lookup(NIXL)
	for _, pair := range [][2]string{
		{`{"peer_host":"a"}`, `{"peer_host":"b"}`},
		{`{"n":1}`, `{"n":2}`},
		{`"x"`, `{"x":1}`},
		{`{"big":12345678901234567890}`, `{"big":12345678901234567891}`},
	} {
		rec := c.Merge([]Params{{"h": raw(pair[0])}, {"h": raw(pair[1])}})
		if _, err := c.Prepare(rec); !errors.Is(err, ErrConflict) {
			t.Errorf("%v: err = %v, want ErrConflict", pair, err)
		}
	}
}

func TestMarshal(t *testing.T) {
	if Marshal(nil) != nil || Marshal(Params{}) != nil {
		t.Fatal("empty params must marshal to nil (field omitted)")
	}
	got := string(Marshal(Params{"h1": raw(`{"b":1.0}`), "h0": raw(`{ "a" : 12345678901234567890 }`)}))
	if want := `{"h0":{"a":12345678901234567890},"h1":{"b":1.0}}`; got != want {
		t.Fatalf("got %s want %s", got, want)
	}
}

func TestJSONEqual(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		eq   bool
	}{
		{`{"a":1,"b":[1,2]}`, `{"b":[1,2],"a":1}`, true},
		{`1.0`, `1`, true},
		{`1e2`, `100`, true},
		{`[1,2]`, `[2,1]`, false},
		{`null`, `{}`, false},
		{`1e999999999`, `1e999999998`, false},
	} {
		if got := jsonEqual(raw(tc.a), raw(tc.b)); got != tc.eq {
			t.Errorf("jsonEqual(%s,%s) = %v", tc.a, tc.b, got)
		}
	}
}
