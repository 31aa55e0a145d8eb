package schema

import (
	"testing"
	"time"
)

type decT struct {
	Pos
	S    Val[string]        `json:"s"`
	N    Val[int]           `json:"n"`
	D    Val[time.Duration] `json:"d"`
	B    Val[bool]          `json:"b"`
	L    Val[[]string]      `json:"l"`
	Raw  Val[any]           `json:"raw"`
	M    Map[Val[int]]      `json:"m"`
	Sub  *decSub            `json:"sub"`
	List []decSub           `json:"list"`
	Skip int                `json:"-"`
}

type decSub struct {
	Pos
	X Val[string] `json:"x"`
}

// Decode fills typed fields with their positions; a wrong type stays
// unset (the schema reports it), an absent field is unset, order is kept.
func TestDecode(t *testing.T) {
	src := "s: hi\nn: \"5\"\nd: 30s\nb: true\nl: [a, b]\nraw: {k: 1}\nm: {z: 1, a: 2}\nsub: {x: y}\nlist:\n  - {x: p}\n  - {x: 3}\n"
	d, ds := LoadYAML("f.yaml", []byte(src))
	if len(ds) != 0 {
		t.Fatal(ds)
	}
	var v decT
	Decode(d, "", &v)
	switch {
	case !v.S.Set || v.S.V != "hi" || v.S.Line != 1 || v.S.Col != 4 || v.S.Ptr != "/s":
		t.Fatalf("s %+v", v.S)
	case v.N.Set || v.N.V != 0 || v.N.Line != 2:
		t.Fatalf("n (a string) %+v", v.N)
	case !v.D.Set || v.D.V != 30*time.Second:
		t.Fatalf("d %+v", v.D)
	case !v.B.V || len(v.L.V) != 2 || v.Raw.V == nil:
		t.Fatalf("b l raw %+v %+v %+v", v.B, v.L, v.Raw)
	case len(v.M) != 2 || v.M[0].Key != "z" || v.M[0].V.V != 1 || v.M[1].KeyPos.Line != 7 || v.M[1].KeyPos.Col != 11:
		t.Fatalf("m %+v", v.M)
	case v.Sub == nil || v.Sub.X.V != "y" || v.Sub.Ptr != "/sub":
		t.Fatalf("sub %+v", v.Sub)
	case len(v.List) != 2 || v.List[0].X.V != "p" || v.List[1].X.Set || v.List[1].Ptr != "/list/1" || v.List[1].Line != 11:
		t.Fatalf("list %+v", v.List)
	}
	var empty decT
	Decode(d, "/absent", &empty)
	if empty.S.Set || empty.Sub != nil || empty.List != nil {
		t.Fatalf("absent %+v", empty)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a field without a json tag must panic")
		}
	}()
	var bad struct{ X Val[string] }
	Decode(d, "", &bad)
}
