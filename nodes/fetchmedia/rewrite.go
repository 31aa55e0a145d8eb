package fetchmedia

import (
	"encoding/base64"

	"github.com/celflow/celflow/connectors/mm"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/jsonb"
)

// rewrite builds the new body once: every downloaded part's url string is
// spliced to "data:<type>;base64,<std b64>" (identical URLs share one
// encoded string) and the whole body is materialised in one allocation.
// A typed part with a bare url string gets the object form {"url":"data:…"}
// (mm.PartRef.WrapOnRewrite), so that the worker sees a shape vLLM's typed
// parser validates; every other part keeps its own shape.
// Items get their type and size, and offsets relative to the new body.
func rewrite(body []byte, parts []mm.PartRef, items []engine.MediaItem, dls []*download) []byte {
	ed := jsonb.NewEditor(body)
	for i, d := range dls {
		if d == nil {
			continue
		}
		if d.repl == nil {
			d.repl = dataURIString(d.typ, d.data)
		}
		ed.Splice(parts[i].ValStart, parts[i].ValEnd, replacement(&parts[i], d))
	}
	out := ed.Body().Bytes()
	// Parts are disjoint and in body order, and each edit lies inside its
	// own part: shift every part by the growth of the edits before it.
	delta := 0
	for i := range items {
		it := &items[i]
		it.PartStart += delta
		if d := dls[i]; d != nil {
			delta += len(replacement(&parts[i], d)) - (parts[i].ValEnd - parts[i].ValStart)
			it.Type, it.Size = d.typ, len(d.data)
		}
		it.PartEnd += delta
	}
	return out
}

// replacement is the bytes that replace part p's url: the data URI string,
// wrapped as an object for a typed bare part.
func replacement(p *mm.PartRef, d *download) []byte {
	if !p.WrapOnRewrite() {
		return d.repl
	}
	if d.wrapped == nil {
		d.wrapped = make([]byte, 0, len(d.repl)+8)
		d.wrapped = append(d.wrapped, `{"url":`...)
		d.wrapped = append(d.wrapped, d.repl...)
		d.wrapped = append(d.wrapped, '}')
	}
	return d.wrapped
}

// dataURIString is the JSON string "data:<type>;base64,<payload>".
func dataURIString(typ string, data []byte) []byte {
	const prefix, mid = `"data:`, `;base64,`
	n := base64.StdEncoding.EncodedLen(len(data))
	out := make([]byte, 0, len(prefix)+len(typ)+len(mid)+n+1)
	out = append(out, prefix...)
	out = append(out, typ...)
	out = append(out, mid...)
	out = base64.StdEncoding.AppendEncode(out, data)
	return append(out, '"')
}
