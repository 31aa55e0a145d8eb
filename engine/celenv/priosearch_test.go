package celenv

import "testing"

// The priority search finds the first failing request of a priority and
// none for one that reads with defaults.
func TestPriorityCounterexample(t *testing.T) {
	for _, tc := range []struct {
		src, req, err string
		col           int
	}{
		{`request.headers["x-tier"] == "gold" ? 10 : 0`, "POST /v1/chat/completions, x-tier absent", "no such key: x-tier", 15},
		{`"x-prio" in request.headers ? int(request.headers["x-prio"]) : 0`, `POST /v1/chat/completions, x-prio: ""`, "type conversion error from 'string' to 'int'", 33},
		{`request.path.split("/")[3] == "chat" ? 1 : 0`, "POST /v1/completions", "index out of bounds: 3", 23},
		{`"x-tier" in request.headers && request.headers["x-tier"] == "gold" ? 10 : 0`, "", "", 0},
		{`bucket(request.id, 10)`, "", "", 0},
	} {
		p, iss := CompilePriority(tc.src)
		if len(iss) > 0 {
			t.Fatalf("%s: %v", tc.src, iss)
		}
		f := p.Counterexample()
		if tc.req == "" {
			if f != nil {
				t.Errorf("%s: unexpected finding %+v", tc.src, f)
			}
			continue
		}
		if f == nil || f.Request != tc.req || f.Err != tc.err || f.Col != tc.col || f.Hint == "" {
			t.Errorf("%s: got %+v", tc.src, f)
		}
	}
}
