package demo

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/celflow/celflow/cmd/internal/sim"
	"github.com/celflow/celflow/engine"
)

func printStack(out io.Writer, st *Stack, o StackOptions) {
	fmt.Fprintln(out, "celflow demo: simulated vLLM workers, a media server and celflow on 127.0.0.1")
	for _, s := range st.Workers {
		fmt.Fprintf(out, "  %-8s %s   (celflow-sim --roles %s)\n", s.Name, s.URL, s.Name)
	}
	mode := "direct pools: celflow picks workers and predicts conditional-decode hits itself"
	if st.Gateway != nil {
		fmt.Fprintf(out, "  %-8s %s   (celflow-sim gateway: routes by EPP-Profile, answers 412 on a prefix miss)\n", "gateway", st.Gateway.URL)
		mode = "gateway mode: every worker leg goes through the simulated Inference Gateway"
	}
	fmt.Fprintf(out, "  %-8s %s   (serves /sample.png)\n", "media", st.Media.URL)
	wf := o.Workflow
	if wf == "" {
		wf = "epd.yaml"
	}
	fmt.Fprintf(out, "  %-8s %s   (workflows/%s; %s)\n", "celflow", st.Celflow.URL, wf, mode)
}

// printPath prints one row per node of the report, in workflow order.
func printPath(out io.Writer, r *engine.Report) {
	if r == nil {
		fmt.Fprintln(out, "   (refused before the workflow ran)")
		return
	}
	fmt.Fprintf(out, "   %-11s %-10s %9s  %-8s %s\n", "node", "status", "time", "upstream", "why")
	for _, o := range r.Outcomes {
		status := o.Status.String()
		if o.Responded {
			status = "answered"
		}
		dur := "-"
		if o.Status != engine.StatusSkipped && o.Status != engine.StatusOmitted {
			dur = ms(o.Duration)
		}
		up := "-"
		if o.HTTPStatus != 0 {
			up = fmt.Sprint(o.HTTPStatus)
		} else if len(o.Items) > 0 {
			var ss []string
			for _, it := range o.Items {
				ss = append(ss, fmt.Sprint(it.HTTPStatus))
			}
			up = strings.Join(ss, ",")
		}
		fmt.Fprintf(out, "   %-11s %-10s %9s  %-8s %s\n", o.Node, status, dur, up, why(o))
	}
}

// why explains an outcome in a few words.
func why(o engine.Outcome) string {
	var parts []string
	switch {
	case o.HTTPStatus == http.StatusPreconditionFailed:
		parts = append(parts, "prefix miss: the 412 edge takes the full path")
	case o.Responded && o.Type == "conditional-decode":
		parts = append(parts, "prefix hit: decode answered at once, the run ends")
	case o.Reason != "":
		parts = append(parts, o.Reason)
	}
	if len(o.Items) > 0 {
		parts = append(parts, fmt.Sprintf("%d item leg(s)", len(o.Items)))
	}
	if o.Attempt > 1 {
		parts = append(parts, fmt.Sprintf("attempt %d", o.Attempt))
	}
	if strings.Contains(o.Edge, "[") && o.Status != engine.StatusSkipped { // a conditional edge fired
		parts = append(parts, "via "+o.Edge)
	}
	if o.Err != nil && !o.Responded && o.HTTPStatus != http.StatusPreconditionFailed {
		parts = append(parts, o.Err.Error())
	}
	return strings.Join(parts, "; ")
}

// printLegs prints what each simulated worker received for the request,
// and the legs the gateway answered itself (a 412 on a prefix miss). With
// neither a conditional-decode leg nor a gateway 412 behind a 412 outcome,
// celflow's own picker predicted the miss (direct mode).
func printLegs(out io.Writer, rep *engine.Report, recs []sim.Record) {
	if len(recs) == 0 {
		return
	}
	fmt.Fprintln(out, "   legs the workers received:")
	conditional := false
	for _, rec := range recs {
		if rec.Headers.Get("Prefer") != "" {
			conditional = true
		}
		if rec.Worker == "gateway" && rec.Upstream != "" {
			continue // printed by the worker that received it
		}
		var notes []string
		if rec.Worker == "gateway" {
			notes = append(notes, "answered by the gateway itself")
		}
		if p := rec.Headers.Get("Epp-Profile"); p != "" {
			notes = append(notes, "EPP-Profile: "+p)
		}
		if p := rec.Headers.Get("Prefer"); p != "" {
			notes = append(notes, "Prefer: "+p)
		}
		if rec.Cache != "" {
			notes = append(notes, "prefix cache "+rec.Cache)
		}
		fmt.Fprintf(out, "     %-8s %s %-32s %d  %8s  %s\n", rec.Worker, rec.Method, rec.Path, rec.Status,
			ms(time.Duration(rec.DurationMS*float64(time.Millisecond))), strings.Join(notes, ", "))
	}
	if o := outcome(rep, "try_decode"); o != nil && o.HTTPStatus == http.StatusPreconditionFailed && !conditional {
		fmt.Fprintln(out, "     (no conditional-decode leg: celflow's picker predicted the prefix miss without a call)")
	}
}

func sortRecords(recs []sim.Record) {
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].Time.Before(recs[j].Time) })
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000)
}
