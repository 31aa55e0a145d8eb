package render

import (
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/nodes/internal/leg"
)

type params struct {
	Address                   string `json:"address"`
	TTFBTimeout               string `json:"ttfb_timeout"`
	MaxTotalTokens            number `json:"max_total_tokens"`
	MaxTotalPlaceholderTokens number `json:"max_total_placeholder_tokens"`
}

const defaultTTFB = 30 * time.Second

type config struct {
	address        string // base URL without trailing slash
	ttfb           time.Duration
	maxTotal       int64
	maxPlaceholder int64
}

func parseParams(raw json.RawMessage) (*config, error) {
	var p params
	if err := leg.Decode(raw, &p); err != nil {
		return nil, err
	}
	var errs engine.ParamErrors
	add := func(err error) {
		if pe, ok := err.(*engine.ParamError); ok {
			errs = append(errs, pe)
		}
	}
	c := &config{}
	switch u, err := url.Parse(p.Address); {
	case p.Address == "":
		// ACCEPTANCE 29: required at load (the reference fails per request).
		add(&engine.ParamError{Msg: "address is required (the render service's base URL)"})
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		add(&engine.ParamError{Path: "/address", Msg: fmt.Sprintf("invalid URL %q (want http://host:port)", p.Address)})
	default:
		c.address = strings.TrimRight(p.Address, "/")
	}
	var err error
	c.ttfb, err = leg.Duration("/ttfb_timeout", p.TTFBTimeout, defaultTTFB)
	add(err)
	c.maxTotal, err = intParam("/max_total_tokens", p.MaxTotalTokens, 0)
	add(err)
	c.maxPlaceholder, err = intParam("/max_total_placeholder_tokens", p.MaxTotalPlaceholderTokens, 0)
	add(err)
	if len(errs) > 0 {
		return nil, errs
	}
	return c, nil
}

// number is a JSON number kept as written; unlike json.Number it refuses a
// quoted "5" (strict decoding, ACCEPTANCE 22).
type number string

func (n *number) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || (b[0] != '-' && (b[0] < '0' || b[0] > '9')) {
		return &json.UnmarshalTypeError{Value: "non-number " + engine.CutUTF8(string(b), 16), Type: reflect.TypeFor[int64]()}
	}
	*n = number(b)
	return nil
}

// intParam reads an integer ≥ lo: 5 and 5.0 are accepted; 4.5 and 1e19 are
// not. Absent is 0.
func intParam(path string, n number, lo int64) (int64, error) {
	if n == "" {
		return 0, nil
	}
	v, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(string(n), 64)
		if ferr != nil || f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
			return 0, &engine.ParamError{Path: path, Msg: fmt.Sprintf("expected an integer that fits int64, got %s", n)}
		}
		v = int64(f)
	}
	if v < lo {
		return 0, &engine.ParamError{Path: path, Msg: fmt.Sprintf("must be at least %d, got %d", lo, v)}
	}
	return v, nil
}
