package render

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/nodes/internal/leg"
)

type params struct {
	Address                   string     `json:"address"`
	TTFBTimeout               string     `json:"ttfb_timeout"`
	MaxTotalTokens            leg.Number `json:"max_total_tokens"`
	MaxTotalPlaceholderTokens leg.Number `json:"max_total_placeholder_tokens"`
	leg.BodyParams
}

const defaultTTFB = 30 * time.Second

// defaultBodyTimeout: a render reply can carry hundreds of MB of kwargs.
const defaultBodyTimeout = 60 * time.Second

type config struct {
	address        string // base URL without trailing slash
	ttfb           time.Duration
	body           leg.BodyBounds // idle_timeout, body_timeout
	maxTotal       int64
	maxPlaceholder int64
}

// parseParams reads the params; fallback is the config's upstream.render,
// used when the node names no address. In validate-only mode (check false)
// a missing address is left to the serve config.
func parseParams(raw json.RawMessage, fallback string, check bool) (*config, error) {
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
	if p.Address == "" {
		p.Address = fallback
	}
	switch u, err := url.Parse(p.Address); {
	case p.Address == "" && !check:
	case p.Address == "":
		// Required at load (the reference fails per request).
		add(&engine.ParamError{Msg: "address is required: set params.address or upstream.render (the render service's base URL)"})
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		add(&engine.ParamError{Path: "/address", Msg: fmt.Sprintf("invalid URL %q (want http://host:port)", p.Address)})
	default:
		c.address = strings.TrimRight(p.Address, "/")
	}
	var err error
	c.ttfb, err = leg.Duration("/ttfb_timeout", p.TTFBTimeout, defaultTTFB)
	add(err)
	var berrs []error
	c.body, berrs = p.BodyParams.Parse(leg.DefaultIdleTimeout, defaultBodyTimeout)
	for _, err := range berrs {
		add(err)
	}
	c.maxTotal, err = leg.Int("/max_total_tokens", p.MaxTotalTokens, 0, 0)
	add(err)
	c.maxPlaceholder, err = leg.Int("/max_total_placeholder_tokens", p.MaxTotalPlaceholderTokens, 0, 0)
	add(err)
	if len(errs) > 0 {
		return nil, errs
	}
	return c, nil
}
