package leg

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
)

// Decode decodes params strictly into v, a pointer to a struct (unknown keys
// are an error at their pointer); empty or null params leave v as it is.
// The compiler has validated params against the type's JSON Schema before
// Build, so an error here means the schema and the Go struct disagree; it
// is still located, from typed information only: the struct's json names
// and encoding/json's *UnmarshalTypeError, never an error text.
func Decode(params json.RawMessage, v any) error {
	p := bytes.TrimSpace(params)
	if len(p) == 0 || string(p) == "null" {
		return nil
	}
	if key, ok := unknownKey(p, v); ok {
		return &engine.ParamError{Path: "/" + key, Msg: fmt.Sprintf("unknown field %q", key)}
	}
	dec := json.NewDecoder(bytes.NewReader(p))
	dec.DisallowUnknownFields() // nested objects
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return &engine.ParamError{Path: "/" + strings.ReplaceAll(te.Field, ".", "/"), Msg: fmt.Sprintf("expected %s, got %s", te.Type, te.Value)}
		}
		return &engine.ParamError{Msg: err.Error()}
	}
	return nil
}

// jsonNames adds the lower-cased json names of st's fields to known (as
// encoding/json sees them: the fields of an untagged embedded struct are
// promoted, names match case-insensitively).
func jsonNames(st reflect.Type, known map[string]bool) {
	for i := 0; i < st.NumField(); i++ {
		f := st.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" && f.Anonymous && f.Type.Kind() == reflect.Struct {
			jsonNames(f.Type, known)
			continue
		}
		if name == "" {
			name = f.Name
		}
		known[strings.ToLower(name)] = true
	}
}

// unknownKey returns the first member of the params object (in sorted
// order) that no json name of v's struct type takes.
func unknownKey(p []byte, v any) (string, bool) {
	t := reflect.TypeOf(v)
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return "", false
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(p, &members) != nil {
		return "", false // not an object: Decode's type error says so
	}
	known := map[string]bool{}
	jsonNames(t.Elem(), known)
	var unknown []string
	for k := range members {
		if !known[strings.ToLower(k)] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return "", false
	}
	sort.Strings(unknown)
	return unknown[0], true
}

// Duration parses a duration param at path; "" gives def. Negative values
// are an error.
func Duration(path, s string, def time.Duration) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, &engine.ParamError{Path: path, Msg: fmt.Sprintf("invalid duration %q (want e.g. \"30s\")", s)}
	}
	if d < 0 {
		return 0, &engine.ParamError{Path: path, Msg: fmt.Sprintf("duration %q must not be negative", s)}
	}
	return d, nil
}

// TokensIn resolves a node's `format` param against the workflow default:
// "openai" or "tokens-in"; "" takes the default.
func TokensIn(format string, b *engine.BuildContext) (bool, error) {
	switch format {
	case "":
		return b.Defaults.TokensIn, nil
	case "openai":
		return false, nil
	case "tokens-in":
		return true, nil
	}
	return false, &engine.ParamError{Path: "/format", Msg: fmt.Sprintf("unknown format %q (want openai or tokens-in)", format)}
}

// RequireRole fails the build when an upstream client is given and has no
// target for role. A nil client (validate-only) passes.
func RequireRole(b *engine.BuildContext, role upstream.Role) error {
	if up, _ := engine.Service[*upstream.Client](b, engine.ServiceUpstream); up == nil || up.HasRole(role) {
		return nil
	}
	return &engine.ParamError{Msg: fmt.Sprintf("no %s target: the upstream section has neither a gateway nor a %s pool", role, role)}
}

// Number is an integer param kept as written until Int reads it; unlike
// json.Number it refuses a quoted "5" (strict decoding).
type Number string

func (n *Number) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || (b[0] != '-' && (b[0] < '0' || b[0] > '9')) {
		return &json.UnmarshalTypeError{Value: "non-number " + engine.CutUTF8(string(b), 16), Type: reflect.TypeFor[int64]()}
	}
	*n = Number(b)
	return nil
}

// Int reads an integer param ≥ lo at path: 5 and 5.0 are accepted; 4.5 and
// 1e19 are errors. An absent value gives def.
func Int(path string, n Number, lo, def int64) (int64, error) {
	if n == "" {
		return def, nil
	}
	v, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(string(n), 64)
		if ferr != nil || f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
			return def, &engine.ParamError{Path: path, Msg: fmt.Sprintf("expected an integer that fits int64, got %s", n)}
		}
		v = int64(f)
	}
	if v < lo {
		return def, &engine.ParamError{Path: path, Msg: fmt.Sprintf("must be at least %d, got %d", lo, v)}
	}
	return v, nil
}

// Default body bounds of a parsed leg (render, encode, prefill, and the
// non-relayed replies of conditional-decode). A worker writes a parsed
// reply in one go once it is computed (the compute is behind ttfb_timeout),
// so seconds of silence mid-body mean a stalled worker, not a slow one.
const (
	DefaultIdleTimeout = 5 * time.Second
	DefaultBodyTimeout = 30 * time.Second
)

// BodyParams are the node params bounding the read of a reply's body; a
// node's params struct embeds it (strict decoding sees both keys).
type BodyParams struct {
	IdleTimeout string `json:"idle_timeout"`
	BodyTimeout string `json:"body_timeout"`
}

// BodyBounds are parsed BodyParams: 0 turns a bound off.
type BodyBounds struct {
	Idle, Body time.Duration
}

// Parse reads the params; "" takes the given defaults. Errors are
// *engine.ParamError at /idle_timeout and /body_timeout.
func (p BodyParams) Parse(defIdle, defBody time.Duration) (BodyBounds, []error) {
	var b BodyBounds
	var errs []error
	var err error
	if b.Idle, err = Duration("/idle_timeout", p.IdleTimeout, defIdle); err != nil {
		errs = append(errs, err)
	}
	if b.Body, err = Duration("/body_timeout", p.BodyTimeout, defBody); err != nil {
		errs = append(errs, err)
	}
	return b, errs
}

// Apply sets the bounds on a leg (upstream.Leg.Idle, .BodyTimeout); expiry
// while the body is read is KindUpstreamTimeout (ReadBody), which the
// default retry rule retries (another endpoint in direct mode, PickFor).
func (b BodyBounds) Apply(l *upstream.Leg) {
	l.Idle, l.BodyTimeout = b.Idle, b.Body
}
