package schema

import (
	"regexp"
	"testing"
	"time"
)

// The editor bundle's duration pattern accepts what time.ParseDuration does.
func TestGoDurationPattern(t *testing.T) {
	re := regexp.MustCompile(goDurationPattern)
	for _, s := range []string{"0", "30s", "1m30s", "100ms", "1.5h", ".5s", "2µs", "3us", "-1s", "+2m", "1h2m3s4ms",
		"", "30", "abc", "1d", "s", "1.5", "P1D", " 1s", "1s "} {
		d, err := time.ParseDuration(s)
		if got, want := re.MatchString(s), err == nil && d >= 0; got != want {
			t.Errorf("%q: pattern %v, time.ParseDuration %v", s, got, want)
		}
	}
}
