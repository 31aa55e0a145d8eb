package k8scheck

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// ServeConfig is the subset of celflow's serve config (docs/configuration.md)
// that the manifests depend on. It is decoded leniently: the full schema is
// celflow's to check, this only reads what the Deployment must agree with.
type ServeConfig struct {
	Server struct {
		Listen          string `json:"listen"`
		DrainDelay      string `json:"drain_delay"`
		ShutdownTimeout string `json:"shutdown_timeout"`
	} `json:"server"`
	Upstream struct {
		Mode    string `json:"mode"`
		Gateway string `json:"gateway"`
		Render  string `json:"render"` // the address of render nodes that name none

	} `json:"upstream"`
	Workflow json.RawMessage `json:"workflow"`
}

// Defaults from docs/protocol.md (Timeouts), used when the config leaves them out.
const (
	defaultDrainDelay      = 5 * time.Second
	defaultShutdownTimeout = 25 * time.Second
)

// ParseServeConfig reads the serve config YAML.
func ParseServeConfig(data []byte) (*ServeConfig, error) {
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, err
	}
	var c ServeConfig
	if err := json.Unmarshal(j, &c); err != nil {
		return nil, err
	}
	return &c, nil
}

// Drain returns drain_delay and shutdown_timeout, defaults applied.
func (c *ServeConfig) Drain() (delay, shutdown time.Duration, err error) {
	parse := func(key, v string, def time.Duration) (time.Duration, error) {
		if v == "" {
			return def, nil
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return 0, fmt.Errorf("server.%s: %w", key, err)
		}
		return d, nil
	}
	if delay, err = parse("drain_delay", c.Server.DrainDelay, defaultDrainDelay); err != nil {
		return 0, 0, err
	}
	shutdown, err = parse("shutdown_timeout", c.Server.ShutdownTimeout, defaultShutdownTimeout)
	return delay, shutdown, err
}

// ExtractWorkflow returns the inline `workflow:` block of a serve config as a
// standalone YAML document, text preserved (comments and key order), so that
// `celflow validate` reports positions a reader can map back: line L of the
// result is line L+Offset of the config. It fails when the workflow is not a
// block mapping under a top-level `workflow:` key, and cross-checks the
// extracted text against the parsed config so a slicing mistake cannot pass.
func ExtractWorkflow(config []byte) (doc []byte, offset, indent int, err error) {
	lines := strings.Split(string(config), "\n")
	start := -1
	for i, l := range lines {
		if strings.TrimRight(l, " \t\r") == "workflow:" {
			start = i
			break
		}
	}
	if start < 0 {
		return nil, 0, 0, fmt.Errorf("no top-level `workflow:` block mapping")
	}
	end := len(lines)
	indent = -1
	for i := start + 1; i < len(lines); i++ {
		l := lines[i]
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "#") {
			continue // comments neither end the block nor set its indent
		}
		n := len(l) - len(strings.TrimLeft(l, " "))
		if n == 0 {
			end = i
			break
		}
		if indent < 0 || n < indent {
			indent = n
		}
	}
	if indent <= 0 {
		return nil, 0, 0, fmt.Errorf("`workflow:` has no indented body")
	}
	var b strings.Builder
	for _, l := range lines[start+1 : end] {
		if len(l) >= indent && strings.TrimSpace(l[:indent]) == "" {
			l = l[indent:]
		} else {
			l = strings.TrimLeft(l, " ")
		}
		b.WriteString(l)
		b.WriteByte('\n')
	}
	doc = []byte(b.String())

	c, err := ParseServeConfig(config)
	if err != nil {
		return nil, 0, 0, err
	}
	got, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("extracted workflow: %w", err)
	}
	var a, w any
	if err := json.Unmarshal(got, &a); err != nil {
		return nil, 0, 0, err
	}
	if err := json.Unmarshal(c.Workflow, &w); err != nil {
		return nil, 0, 0, err
	}
	if !reflect.DeepEqual(a, w) {
		return nil, 0, 0, fmt.Errorf("extracted workflow text differs from the parsed `workflow:` value")
	}
	return doc, start + 1, indent, nil
}
