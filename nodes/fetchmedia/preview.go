package fetchmedia

import (
	"context"
	"mime"
	"path"

	"github.com/celflow/celflow/engine"
)

// Preview is what explain and the tests: block run in place of the node
// (engine.Previewer): Run's own scan and checks, without downloading.
// Inline items (data URIs, input_audio) get their real type and decoded
// size; a remote item gets the type its URL's extension names when the
// modality allows it (a download would take the reply's Content-Type) and
// size 0, unknown without fetching.
func (n *Node) Preview(ctx context.Context, x *engine.Exec) engine.Result {
	if err := ctx.Err(); err != nil {
		return engine.Result{Err: engine.AsError(err)}
	}
	_, items, dls, _, e := n.scan(x.Run.State.Body)
	if e != nil {
		return engine.Result{Err: e}
	}
	for i, d := range dls {
		if d == nil {
			continue
		}
		t, _, _ := mime.ParseMediaType(mime.TypeByExtension(path.Ext(d.u.Path)))
		if d.pol != nil && d.pol.types[t] {
			items[i].Type = t
		}
	}
	x.Run.State.Media = items
	return engine.Result{Attrs: map[string]any{"celflow.media.items": len(items)}}
}

var _ engine.Previewer = (*Node)(nil)
