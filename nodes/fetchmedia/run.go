package fetchmedia

import (
	"context"
	"net/url"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/celflow/celflow/connectors/mm"
	"github.com/celflow/celflow/engine"
)

// download is one distinct remote URL of a request (identical URLs of one
// modality are fetched once).
type download struct {
	u     *url.URL
	first int // index of the first item using it, for messages
	pol   *modPolicy
	mod   string
	typ   string
	data  []byte
	hit   bool
	repl  []byte // the data: URI JSON string, built once per download
	// wrapped is {"url":<repl>}, built once when a typed part with a bare
	// url string uses this download (rewrite).
	wrapped []byte
}

// Run implements engine.Node.
func (n *Node) Run(ctx context.Context, x *engine.Exec) engine.Result {
	if err := ctx.Err(); err != nil { // already cancelled: nothing parsed or fetched
		return engine.Result{Err: engine.AsError(err)}
	}
	st := &x.Run.State
	body := st.Body
	parts, items, dls, order, e := n.scan(body)
	if e != nil {
		return engine.Result{Err: e}
	}
	attrs := map[string]any{"celflow.media.items": len(items)}
	if len(order) > 0 {
		if e := n.downloadAll(ctx, order, attrs); e != nil {
			return engine.Result{Err: e, Attrs: attrs}
		}
		st.Body = rewrite(body, parts, items, dls)
	}
	st.Media = items
	return engine.Result{Attrs: attrs}
}

// scan finds the body's media parts and validates each without I/O:
// inline items get their type and size, remote ones the download they
// share with identical URLs of their modality (dls per item, nil for
// inline; order lists the distinct downloads).
func (n *Node) scan(body []byte) (parts []mm.PartRef, items []engine.MediaItem, dls, order []*download, e *engine.Error) {
	parts, err := mm.ScanParts(body, nil)
	if err != nil {
		return nil, nil, nil, nil, mm.ScanError(err)
	}
	if max := n.cfg.maxEntries; max > 0 && len(parts) > max {
		return nil, nil, nil, nil, engine.Errorf(engine.KindInvalidRequest,
			"too many multimodal items: got %d, max %d", len(parts), max)
	}
	items = make([]engine.MediaItem, len(parts))
	dls = make([]*download, len(parts))
	seen := map[string]*download{}
	for i := range parts {
		p := &parts[i]
		it := &items[i]
		*it = engine.MediaItem{Index: i, Modality: p.Modality, Part: p.Part, PartStart: p.PartStart, PartEnd: p.PartEnd}
		u, e := n.inspect(body, p, it)
		if e != nil {
			return nil, nil, nil, nil, e
		}
		if u == nil {
			continue
		}
		key := p.Modality + " " + u.String()
		d := seen[key]
		if d == nil {
			d = &download{u: u, first: i, pol: n.cfg.mods[p.Modality], mod: p.Modality}
			seen[key] = d
			order = append(order, d)
		}
		dls[i] = d
	}
	return parts, items, dls, order, nil
}

// inspect validates one part without I/O (inline payloads are checked here,
// remote URLs only for scheme, control characters and domain). It returns
// the URL to download, or nil for inline media.
func (n *Node) inspect(body []byte, p *mm.PartRef, it *engine.MediaItem) (*url.URL, *engine.Error) {
	pol := n.cfg.mods[p.Modality]
	v, ok := mm.Unquote(body[p.ValStart:p.ValEnd])
	if !ok {
		return nil, itemErr(engine.KindInvalidMedia, it, "value is not a valid JSON string")
	}
	if p.Type == "input_audio" {
		f := strings.ToLower(strings.TrimSpace(p.Format))
		if !n.cfg.audioFmts[f] {
			return nil, itemErr(engine.KindInvalidMedia, it, "input_audio format "+quoteShort(p.Format)+" is not allowed")
		}
		size, err := checkBase64(v, pol.maxBytes)
		if err != nil {
			return nil, itemErr(engine.KindInvalidMedia, it, "input_audio data: "+err.Error())
		}
		it.Type, it.Size = audioType(f), int(size)
		return nil, nil
	}
	if len(v) >= 5 && strings.EqualFold(string(v[:5]), "data:") {
		typ, payload, err := parseDataURI(v)
		if err != nil {
			return nil, itemErr(engine.KindInvalidMedia, it, err.Error())
		}
		if !pol.types[typ] {
			return nil, itemErr(engine.KindInvalidMedia, it, "data URI media type "+quoteShort(typ)+" is not allowed for "+p.Modality)
		}
		size, err := checkBase64(payload, pol.maxBytes)
		if err != nil {
			return nil, itemErr(engine.KindInvalidMedia, it, "data URI "+err.Error())
		}
		it.Type, it.Size = typ, int(size)
		return nil, nil
	}
	for _, c := range v {
		if c < 0x20 || c == 0x7f {
			return nil, itemErr(engine.KindInvalidMedia, it, "URL contains a control character")
		}
	}
	u, err := url.Parse(string(v))
	if err != nil {
		return nil, itemErr(engine.KindInvalidMedia, it, "URL does not parse")
	}
	if err := n.fetch.checkURL(u); err != nil {
		return nil, itemErr(engine.KindInvalidMedia, it, err.Error())
	}
	it.Remote = true
	return u, nil
}

// downloadAll fetches the distinct URLs, at most max_concurrent_downloads at
// a time; the first failure cancels the rest.
func (n *Node) downloadAll(ctx context.Context, order []*download, attrs map[string]any) *engine.Error {
	hits := 0
	if n.cache != nil {
		for _, d := range order {
			typ, data, ok := n.cache.get(d.u.String())
			if !ok {
				continue
			}
			// A hit passes this request's checks like a fresh download.
			if int64(len(data)) > d.pol.maxBytes {
				return errAt(engine.KindInvalidMedia, d, (&tooLargeError{Size: int64(len(data)), Limit: d.pol.maxBytes}).Error(), nil)
			}
			if !d.pol.types[typ] {
				return errAt(engine.KindInvalidMedia, d, "media type "+typ+" is not allowed for "+d.mod, nil)
			}
			d.typ, d.data, d.hit = typ, data, true
			hits++
		}
		attrs["celflow.media.cache_hits"] = hits
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(n.cfg.concurrency)
	fetched := 0
	for _, d := range order {
		if d.hit {
			continue
		}
		fetched++
		g.Go(func() error {
			if gctx.Err() != nil {
				return nil // a sibling failed (its error is kept) or the client left
			}
			ictx, cancel := context.WithTimeout(gctx, n.cfg.timeout)
			defer cancel()
			typ, data, err := n.fetch.download(ictx, d.u, d.pol, d.mod)
			if err != nil {
				return n.classify(ctx, gctx, ictx, d, err)
			}
			d.typ, d.data = typ, data
			if n.cache != nil {
				n.cache.put(d.u.String(), typ, data)
			}
			return nil
		})
	}
	err := g.Wait()
	attrs["celflow.media.downloads"] = fetched
	if err != nil {
		return engine.AsError(err)
	}
	if cerr := ctx.Err(); cerr != nil {
		return engine.AsError(cerr)
	}
	return nil
}

func audioType(format string) string {
	switch format {
	case "wav":
		return "audio/wav"
	case "mp3":
		return "audio/mpeg"
	}
	return "audio/" + format
}

// quoteShort quotes a client value for a message, cut so that a hostile
// value cannot flood a reply.
func quoteShort(s string) string {
	return `"` + engine.CutUTF8(s, 64) + `"`
}

func itemErr(k engine.Kind, it *engine.MediaItem, msg string) *engine.Error {
	return engine.Errorf(k, "media item %d (%s): %s", it.Index, it.Modality, msg)
}

func errAt(k engine.Kind, d *download, msg string, cause error) *engine.Error {
	e := engine.Errorf(k, "media item %d (%s): %s", d.first, d.mod, msg)
	e.Cause = cause
	return e
}
