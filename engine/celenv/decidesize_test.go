package celenv

import "testing"

// A list whose size is a fact decides size(), .size() and the exists/all
// macros over it; anything else about it stays unknown.
func TestDecideSize(t *testing.T) {
	env, err := NewEnv(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	empty := Facts{SizeFact("media"): int64(0)}
	for _, tc := range []struct {
		src  string
		f    Facts
		want Tri
	}{
		{"size(media) > 0", empty, False},
		{"media.size() == 0", empty, True},
		{`media.exists(m, m.modality == "image")`, empty, False},
		{`media.all(m, m.size < 10)`, empty, True},
		{`media.exists_one(m, m.remote)`, empty, Unknown}, // its result is not the accumulator
		{"size(media) > 0 && request.model == \"m\"", empty, False},
		{"size(media) > 0", Facts{}, Unknown},
		{`media.exists(m, m.remote)`, Facts{SizeFact("media"): int64(2)}, Unknown},
		{`size(request.model) > 0`, empty, Unknown},
	} {
		x, iss := env.Compile(tc.src, Guard)
		if len(iss) > 0 {
			t.Fatalf("%s: %v", tc.src, iss)
		}
		if got := x.Decide(tc.f); got != tc.want {
			t.Errorf("%s under %v: %v, want %v", tc.src, tc.f, got, tc.want)
		}
	}
}
