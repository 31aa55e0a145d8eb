package kv

import (
	"fmt"
	"os"
	"strconv"
)

// DefaultBootstrapPort is SGLang's default bootstrap port.
const DefaultBootstrapPort = 8998

// BootstrapPortEnv names the variable that overrides the default port.
const BootstrapPortEnv = "SGLANG_BOOTSTRAP_PORT"

// BootstrapPort reads SGLANG_BOOTSTRAP_PORT (see ParseBootstrapPort). It is
// called at load by every node that uses kv-sglang, so a bad value is a load
// error (celflow differs: the reference logs it and falls back).
func BootstrapPort() (int, error) { return ParseBootstrapPort(os.Getenv(BootstrapPortEnv)) }

// ParseBootstrapPort parses a bootstrap port: "" (unset) gives 8998, anything
// else must be plain decimal digits naming a port in 1–65535 ("abc", "9100x",
// "0", "-1", "65536" and "+80" are errors).
func ParseBootstrapPort(s string) (int, error) {
	if s == "" {
		return DefaultBootstrapPort, nil
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%s=%q: not a port number (1-65535)", BootstrapPortEnv, s)
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("%s=%q: port out of range (1-65535)", BootstrapPortEnv, s)
	}
	return n, nil
}
