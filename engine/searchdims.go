package engine

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/celflow/celflow/engine/celenv"
)

// The search's dimensions (search.go): the values each part of a request
// and of the run state takes, derived from what the expression reads and
// the literals it compares with.

func strp(s string) *string { return &s }

// headerValues are the values a header the expression reads is tried at
// (celenv.ProbeValues: the priority search's too).
func (s *searcher) headerValues(r *reads) []*string {
	return celenv.ProbeValues(r.strs, r.ints, r.seps, s.vars)
}

// mediaShape is one media list tried: n items of each listed modality.
type mediaShape struct {
	mods []string
	desc string
}

func mediaShapes(r *reads) []mediaShape {
	out := []mediaShape{{nil, "no media"}}
	for _, m := range []string{"image", "video", "audio"} {
		out = append(out, mediaShape{[]string{m}, "1 " + m})
	}
	for _, m := range []string{"image", "video", "audio"} {
		out = append(out, mediaShape{[]string{m, m, m}, "3 " + m + "s"})
	}
	out = append(out, mediaShape{[]string{"image", "video", "audio"}, "an image, a video and an audio item"})
	for _, n := range celenv.IntNeighbours(r.ints) {
		if n == 2 || n > 3 && n <= 8 {
			mods := make([]string, n)
			for i := range mods {
				mods[i] = "image"
			}
			out = append(out, mediaShape{mods, fmt.Sprintf("%d images", n)})
		}
	}
	return out
}

// mimeOf is a media type a chat item of the modality carries.
var mimeOf = map[string]string{"image": "image/png", "video": "video/mp4", "audio": "audio/wav"}

// items are the media items fetch-media (chat) or the front (generate:
// features, no type or size) would give the run.
func (m mediaShape) items(route Route) []MediaItem {
	var out []MediaItem
	part := map[string]int{}
	for i, mod := range m.mods {
		it := MediaItem{Index: i, Modality: mod, Part: part[mod]}
		part[mod]++
		if route == RouteGenerate {
			it.Hash = "h" + strconv.Itoa(i)
		} else {
			it.Type, it.Size = mimeOf[mod], 1024
		}
		out = append(out, it)
	}
	return out
}

// tokenCounts are the prompt lengths tried (-1: unknown, no render yet).
func tokenCounts(r *reads) []int {
	out := []int{-1, 0, 1, kvBlock - 1, kvBlock, kvBlock + 1}
	for _, n := range celenv.IntNeighbours(r.ints) {
		if n >= 0 {
			v := int(min(n, maxProbeTokens))
			if !slices.Contains(out, v) {
				out = append(out, v)
			}
		}
	}
	return out
}

// dims lists the dimensions of se's search and a constructor of the
// default probe.
func (s *searcher) dims(se *searchExpr, r *reads) ([]dim, func() *probe) {
	tab := &probeReq{modelVals: []*string{nil}}
	var routes []Route
	for _, rt := range Routes {
		if s.w.routes[rt] {
			routes = append(routes, rt)
		}
	}
	var dims []dim
	dims = append(dims, dim{n: len(routes),
		set:  func(p *probe, i int) { p.route = routes[i] },
		desc: func(p *probe, i int) string { return "POST " + routes[i].Path() }})
	if r.model {
		seen := map[string]bool{}
		for _, v := range append(append([]string{"m"}, r.strs...), s.vars...) {
			if !seen[v] {
				seen[v] = true
				tab.modelVals = append(tab.modelVals, strp(v))
			}
		}
		dims = append(dims, dim{n: len(tab.modelVals),
			set: func(p *probe, i int) { p.model = i },
			desc: func(p *probe, i int) string {
				if tab.modelVals[i] == nil {
					return "no model"
				}
				return "model " + strconv.Quote(*tab.modelVals[i])
			}})
	}
	if r.stream {
		dims = append(dims, dim{n: 2,
			set: func(p *probe, i int) { p.stream = i == 1 },
			desc: func(p *probe, i int) string {
				if i == 1 {
					return "stream: true"
				}
				return "stream: false"
			}})
	}
	vals := s.headerValues(r)
	for d, name := range r.headers {
		tab.headers = append(tab.headers, name)
		tab.headerVals = append(tab.headerVals, vals)
		dims = append(dims, dim{n: len(vals),
			set:  func(p *probe, i int) { p.hdr[d] = i },
			desc: func(p *probe, i int) string { return celenv.HeaderDesc(name, vals[i]) }})
	}
	if r.media {
		shapes := mediaShapes(r)
		dims = append(dims, dim{n: len(shapes),
			set: func(p *probe, i int) {
				if p.route == RouteCompletions && len(shapes[i].mods) > 0 {
					p.skip = true // a completions prompt has no media
					return
				}
				p.media = shapes[i].items(p.route)
			},
			desc: func(p *probe, i int) string { return shapes[i].desc }})
	}
	if r.tokens {
		counts := tokenCounts(r)
		dims = append(dims, dim{n: len(counts),
			set: func(p *probe, i int) {
				p.tokens = counts[i]
				if p.route == RouteGenerate && p.tokens < 0 {
					p.tokens = 1 // generate: the body's token_ids are known at entry
				}
			},
			desc: func(p *probe, i int) string {
				if p.tokens < 0 {
					return "tokens.known false (count 0)"
				}
				return "tokens.count " + strconv.Itoa(p.tokens)
			}})
	}
	type stateDefault struct {
		i int
		o Outcome
	}
	var defaults []stateDefault
	for i := range s.w.nodes {
		st := r.states[i]
		if st == nil {
			continue
		}
		o := Outcome{Status: StatusSucceeded, HTTPStatus: 200, Attempt: 1}
		statuses := []Status{StatusSucceeded, StatusFailed, StatusSkipped, StatusOmitted, StatusTimedOut, StatusCancelled}
		switch {
		case se.what == "retry rule" && i == se.about:
			o.Status, o.HTTPStatus = StatusFailed, 503
			statuses = []Status{StatusFailed, StatusTimedOut}
		case i == se.about && s.w.nodes[i].contract.Responds:
			// A responder that succeeds has answered: the run ends and no
			// edge out of it is evaluated; its failures are (a 412 miss).
			o.Status, o.HTTPStatus = StatusFailed, 503
			if slices.Contains(s.w.nodes[i].contract.Statuses, 412) {
				o.HTTPStatus = 412
			}
			statuses = []Status{StatusFailed, StatusTimedOut}
		case i == se.about:
			statuses = []Status{StatusSucceeded, StatusFailed, StatusTimedOut}
		}
		defaults = append(defaults, stateDefault{i, o})
		id := s.w.nodes[i].id
		who := "node " + id
		if i == se.about {
			who = id // "outcome"
		}
		if st.status {
			dims = append(dims, dim{n: len(statuses),
				set:  func(p *probe, k int) { p.states[i].Status = statuses[k] },
				desc: func(p *probe, k int) string { return who + " " + statuses[k].String() }})
		}
		if st.http {
			codes := []int{o.HTTPStatus}
			for _, c := range append([]int{200, 412, 503, 500, 429, 504, 0}, int64sToInts(celenv.IntNeighbours(r.ints), 100, 599)...) {
				if !slices.Contains(codes, c) {
					codes = append(codes, c)
				}
			}
			dims = append(dims, dim{n: len(codes),
				set: func(p *probe, k int) {
					o := p.states[i]
					o.HTTPStatus = codes[k]
					// A node that succeeded got a 2xx (or made no call), one
					// that failed or timed out did not, one that did not run
					// has none: other pairs are no run's.
					ok2xx := o.HTTPStatus >= 200 && o.HTTPStatus < 300
					switch o.Status {
					case StatusSucceeded, StatusFailed, StatusTimedOut:
						if o.HTTPStatus != 0 && ok2xx != (o.Status == StatusSucceeded) {
							p.skip = true
						}
					default:
						if o.HTTPStatus != 0 {
							p.skip = true
						}
					}
				},
				desc: func(p *probe, k int) string { return fmt.Sprintf("%s answered HTTP %d", who, codes[k]) }})
		}
		for _, name := range st.headers {
			canon := http.CanonicalHeaderKey(name)
			dims = append(dims, dim{n: len(vals),
				set: func(p *probe, k int) {
					o := p.states[i]
					o.Header = o.Header.Clone()
					if o.Header == nil {
						o.Header = http.Header{}
					}
					if vals[k] == nil {
						o.Header.Del(canon)
					} else {
						o.Header.Set(canon, *vals[k])
					}
				},
				desc: func(p *probe, k int) string { return who + "'s response " + celenv.HeaderDesc(name, vals[k]) }})
		}
		if st.dur {
			durs := []time.Duration{0, time.Millisecond, time.Second, 30 * time.Second}
			for _, d := range r.durs {
				for _, v := range []time.Duration{d - time.Millisecond, d, d + time.Millisecond} {
					if v >= 0 && !slices.Contains(durs, v) {
						durs = append(durs, v)
					}
				}
			}
			dims = append(dims, dim{n: len(durs),
				set:  func(p *probe, k int) { p.states[i].Duration = durs[k] },
				desc: func(p *probe, k int) string { return who + " took " + durs[k].String() }})
		}
		if st.attempt {
			atts := []int{1, 2, 3}
			if se.what == "retry rule" && i == se.about {
				atts = atts[:0]
				for a := 1; a < se.attempts; a++ {
					atts = append(atts, a)
				}
			} else {
				atts = append(atts, int64sToInts(celenv.IntNeighbours(r.ints), 1, 100)...)
				slices.Sort(atts)
				atts = slices.Compact(atts)
			}
			dims = append(dims, dim{n: len(atts),
				set:  func(p *probe, k int) { p.states[i].Attempt = atts[k] },
				desc: func(p *probe, k int) string { return fmt.Sprintf("%s attempt %d", who, atts[k]) }})
		}
	}
	base := func() *probe {
		p := &probe{route: routes[0], tokens: -1, tab: tab, hdr: make([]int, len(tab.headers))}
		if len(defaults) > 0 {
			p.states = make(map[int]*Outcome, len(defaults))
			for _, d := range defaults {
				o := d.o
				p.states[d.i] = &o
			}
		}
		return p
	}
	return dims, base
}

func int64sToInts(in []int64, lo, hi int64) []int {
	var out []int
	for _, v := range in {
		if v >= lo && v <= hi {
			out = append(out, int(v))
		}
	}
	return out
}
