package telemetry

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"
)

// Uninstall turns tracing off again: the request helpers go back to their
// no-op path and the global provider becomes a no-op one (which the engine
// also treats as off). For one-shot tools that trace a single run in
// memory (`celflow explain --trace`) and for tests.
func Uninstall() {
	installed.Store(nil)
	otel.SetTracerProvider(noop.NewTracerProvider())
}
