package buildversion

import (
	"bytes"
	"runtime/debug"
	"strings"
	"testing"
)

func TestResolve(t *testing.T) {
	if got := Resolve("v1.2.3"); got != "v1.2.3" {
		t.Errorf("stamped: %q", got)
	}
	if got := Resolve(""); got == "" {
		t.Error("unstamped: empty version")
	}
}

func TestFromBuildInfo(t *testing.T) {
	set := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	for _, tc := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"go install @version", debug.BuildInfo{Main: debug.Module{Version: "v0.4.0"}}, "v0.4.0"},
		{"vcs clean", debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: set("vcs.revision", "3aa4a95c0ffee0123456789abcdef", "vcs.modified", "false")}, "3aa4a95c0ffe"},
		{"vcs dirty", debug.BuildInfo{Settings: set("vcs.revision", "3aa4a95", "vcs.modified", "true")}, "3aa4a95-dirty"},
		{"nothing", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "dev"},
	} {
		if got := fromBuildInfo(&tc.bi); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestIsRequest(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"--version"}, true}, {[]string{"-version"}, true}, {[]string{"version"}, true},
		{nil, false}, {[]string{"--version", "x"}, false}, {[]string{"serve"}, false},
	} {
		if got := IsRequest(tc.args); got != tc.want {
			t.Errorf("%q: %v", tc.args, got)
		}
	}
	var b bytes.Buffer
	Print(&b, "celflow-sim", "vX")
	if !strings.HasPrefix(b.String(), "celflow-sim vX (go") {
		t.Errorf("Print: %q", b.String())
	}
}
