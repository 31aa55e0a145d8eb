package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Model is one entry of an OpenAI model list, as celflow re-emits it: the
// upstream's other fields are not relayed (upstream bodies never reach
// clients raw).
type Model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// Bounds on what an upstream's model list may hold.
const (
	maxModelsBody = 1 << 20
	maxModels     = 1024
	maxModelID    = 256
)

// PathModels is the model list path of vLLM, SGLang and the gateway.
const PathModels = "/v1/models"

// ListModels asks the upstreams for their models: in direct mode every
// endpoint of every pool at once, named pools included (a model served only
// by a named pool is listed) (the union, by id; an endpoint that fails
// is skipped and reported in failed), in gateway mode the gateway, as a
// decode leg (EPP-Profile: decode; a request without a profile would take
// the client route back to celflow), tried twice. err is non-nil only when
// no upstream answered. The list is sorted by id.
func (c *Client) ListModels(ctx context.Context) (models []Model, failed []error, err error) {
	var bases []string
	if c.impl.direct {
		seen := map[string]bool{}
		for _, p := range c.impl.allPools() {
			for _, e := range p.eps {
				if !seen[e.base] {
					seen[e.base] = true
					bases = append(bases, e.base)
				}
			}
		}
	}
	lists := make([][]Model, len(bases))
	errs := make([]error, len(bases))
	if c.impl.direct {
		var wg sync.WaitGroup
		for i, b := range bases {
			wg.Add(1)
			go func() {
				defer wg.Done()
				lists[i], errs[i] = c.impl.getModels(ctx, b, "")
			}()
		}
		wg.Wait()
	} else {
		bases = []string{c.impl.gateway}
		lists, errs = make([][]Model, 1), make([]error, 1)
		for attempt := 0; attempt < 2; attempt++ {
			if lists[0], errs[0] = c.impl.getModels(ctx, c.impl.gateway, string(RoleDecode)); errs[0] == nil || ctx.Err() != nil {
				break
			}
		}
	}
	byID := map[string]Model{}
	answered := 0
	for i, l := range lists {
		if errs[i] != nil {
			failed = append(failed, fmt.Errorf("%s: %w", bases[i], errs[i]))
			continue
		}
		answered++
		for _, m := range l {
			if _, ok := byID[m.ID]; !ok && len(byID) < maxModels {
				byID[m.ID] = m
			}
		}
	}
	if answered == 0 {
		return nil, failed, errors.Join(failed...)
	}
	models = make([]Model, 0, len(byID))
	for _, m := range byID {
		models = append(models, m)
	}
	sort.Slice(models, func(i, j int) bool { return models[i].ID < models[j].ID })
	return models, failed, nil
}

// getModels is one GET <base>/v1/models.
func (c *client) getModels(ctx context.Context, base, profile string) ([]Model, error) {
	body, err := c.getModelsBody(ctx, base, profile)
	if err != nil {
		return nil, err
	}
	return parseModels(body)
}

// errNotModelList: a 200 whose body is not an OpenAI model list.
var errNotModelList = errors.New(`model list is not a JSON object with a "data" array`)

// getModelsBody is the bounded body of one GET <base>/v1/models.
func (c *client) getModelsBody(ctx context.Context, base, profile string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+PathModels, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	if profile != "" {
		req.Header.Set("EPP-Profile", profile)
	}
	resp, err := c.rt.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 8<<10))
		return nil, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxModelsBody+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxModelsBody {
		return nil, fmt.Errorf("model list over %d bytes", maxModelsBody)
	}
	return body, nil
}

// parseModels reads an OpenAI model list, keeping entries whose id is a
// printable string of at most 256 bytes; created and owned_by are kept when
// they have the right type.
func parseModels(body []byte) ([]Model, error) {
	var doc struct {
		Data []json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("model list is not JSON: %w", err)
	}
	if doc.Data == nil {
		return nil, errors.New(`model list has no "data" array`)
	}
	out := make([]Model, 0, min(len(doc.Data), maxModels))
	for _, raw := range doc.Data {
		var d struct {
			ID      any `json:"id"`
			Created any `json:"created"`
			OwnedBy any `json:"owned_by"`
		}
		if len(out) == maxModels {
			break
		}
		if json.Unmarshal(raw, &d) != nil {
			continue // not an object: skipped, as a bad id is
		}
		id, ok := d.ID.(string)
		if !ok || !printable(id, maxModelID) {
			continue
		}
		m := Model{ID: id, Object: "model", OwnedBy: "celflow"}
		if n, ok := d.Created.(float64); ok && n >= 0 && n < 1<<53 {
			m.Created = int64(n)
		}
		if o, ok := d.OwnedBy.(string); ok && printable(o, maxModelID) {
			m.OwnedBy = o
		}
		out = append(out, m)
	}
	return out, nil
}

// printable: non-empty, at most max bytes of valid UTF-8 without control
// characters.
func printable(s string, max int) bool {
	if s == "" || len(s) > max || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}
