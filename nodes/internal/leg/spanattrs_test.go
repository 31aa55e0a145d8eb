package leg_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/celflow/celflow/connectors/upstream"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/internal/jsonb"
	"github.com/celflow/celflow/nodes/internal/leg"
	"github.com/celflow/celflow/nodes/internal/leg/legtest"
)

// Issue 6: with tracing on, Do puts the time to first byte and ReadJSON the
// bytes read on the calling node's span; with no recording span nothing is
// set (and nothing breaks).
func TestLegSpanAttrs(t *testing.T) {
	const reply = `{"ok":true,"pad":"0123456789"}`
	w := legtest.NewWorker(t, func(rw http.ResponseWriter, _ *http.Request, _ legtest.Call) {
		time.Sleep(20 * time.Millisecond)
		legtest.JSON(200, reply)(rw, nil, legtest.Call{})
	})
	for _, tc := range []struct {
		name   string
		traced bool
	}{{"traced", true}, {"untraced", false}} {
		t.Run(tc.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			defer tp.Shutdown(context.Background())
			run, _ := legtest.Run(t, engine.RouteChat, `{}`, nil)
			x := legtest.Exec(run, "prefill")
			if tc.traced {
				_, x.Span = tp.Tracer("t").Start(context.Background(), "prefill")
			}
			l := leg.NewLeg(x, upstream.RolePrefill, "/v1/chat/completions", jsonb.Raw([]byte(`{}`)), 0)
			resp, e := leg.Send(context.Background(), x, legtest.Gateway(t, w.URL), w.URL, l)
			if e != nil {
				t.Fatal(e)
			}
			if _, e := leg.ReadJSON(x, resp, 1<<20); e != nil {
				t.Fatal(e)
			}
			if !tc.traced {
				if n := len(rec.Ended()); n != 0 {
					t.Fatalf("%d spans recorded untraced", n)
				}
				return
			}
			x.Span.End()
			spans := rec.Ended()
			if len(spans) != 1 {
				t.Fatalf("%d spans", len(spans))
			}
			got := map[attribute.Key]attribute.Value{}
			for _, kv := range spans[0].Attributes() {
				got[kv.Key] = kv.Value
			}
			if v, ok := got[leg.AttrTTFB]; !ok || v.AsFloat64() < 20 || v.AsFloat64() > 10_000 {
				t.Errorf("celflow.ttfb_ms = %v (set %v), want >= 20", v.AsFloat64(), ok)
			}
			if v := got[leg.AttrBytesIn]; v.AsInt64() != int64(len(reply)) {
				t.Errorf("celflow.bytes_in = %v, want %d", v.AsInt64(), len(reply))
			}
		})
	}
}
