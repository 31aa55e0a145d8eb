package main

import (
	"net/http"

	"github.com/celflow/celflow/cmd/internal/server/admission"
	"github.com/celflow/celflow/cmd/internal/server/config"
	"github.com/celflow/celflow/cmd/internal/server/front"
	"github.com/celflow/celflow/engine"
	"github.com/celflow/celflow/nodes/asyncbroker"
)

// admissionOf turns the config's admission section into the front's: one
// class per route (front.RouteClass).
func admissionOf(a config.Admission) front.Admission {
	class := make([]int, front.AdmissionClasses)
	for _, rt := range engine.Routes {
		class[front.RouteClass(rt)] = a.Routes[rt.String()]
	}
	return front.Admission{
		Limits: admission.Limits{MaxInFlight: a.MaxInFlight, Class: class,
			MaxQueue: a.MaxQueue, QueueTimeout: a.QueueTimeout},
		Priority:   a.Priority,
		RetryAfter: a.RetryAfter,
	}
}

// dispatchedRequest marks the async dispatcher's requests for admission:
// spare capacity only, never a wait in the queue ahead of online requests.
func dispatchedRequest(r *http.Request) bool { return asyncbroker.Dispatched(r.Context()) }
