package celenv

import "testing"

// A lone = (an assignment written for a comparison) is found outside
// string literals and away from other operators; ==, !=, <=, >= and
// "a=b" are not it.
func TestLoneAssign(t *testing.T) {
	for _, c := range []struct {
		src       string
		line, col int
		ok        bool
	}{
		{"response.status = 412", 1, 16, true},
		{"a == 1 &&\n  b = 2", 2, 4, true},
		{"response.status == 412", 0, 0, false},
		{"a != 1 || a <= 2 || a >= 3", 0, 0, false},
		{`request.model == "a=b"`, 0, 0, false},
		{`request.model == 'x = y'`, 0, 0, false},
		{`r"a\" == 'b' = c`, 1, 13, true},
		{`"""a = b""" == request.model`, 0, 0, false},
		{`request.format == = "chat"`, 0, 0, false}, // another typo: the parser says it better
		{"= 1", 0, 0, false},
	} {
		line, col, ok := loneAssign(c.src)
		if ok != c.ok || line != c.line || col != c.col {
			t.Errorf("%q: got %d:%d %v, want %d:%d %v", c.src, line, col, ok, c.line, c.col, c.ok)
		}
	}
}

// The compile issue is one, with the did-you-mean and a fix.
func TestCompileLoneAssign(t *testing.T) {
	env, err := NewEnv(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, iss := env.Compile("response.status = 412", Edge)
	if len(iss) != 1 || iss[0].Rule != "cel/syntax" || iss[0].Col != 16 || iss[0].Hint == "" ||
		iss[0].Msg != "`=` is not an operator in CEL: did you mean `==`?" {
		t.Fatalf("got %+v", iss)
	}
}
