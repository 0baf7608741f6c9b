package bridge

import (
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// maxToolLabels bounds the distinct tool label values per app. Tool names come from a page's
// manifest, which a hostile page controls, so even "names in the current manifest" must be capped
// to keep label cardinality bounded.
const maxToolLabels = 256

// callBuckets resolve the bridge's own overhead (a healthy call takes 0.5-2 ms and the latency
// goal is about 2 ms) as well as tool time up to the 600 s maximum timeout: a 10 ms first bucket
// would put every healthy call in one bucket.
var callBuckets = []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// metrics are the bridge's Prometheus hooks; a nil *metrics records nothing.
//
// The children of the vectors are cached per label set: WithLabelValues validates, hashes and
// looks up every label value under the vector's lock on each call, and a call records three
// series and a page message one. Every cached key is the label set of a live series, so the
// caches are bounded as the series are (apps from the config, surfaces, kinds, statuses and
// page types from fixed sets, tools by maxToolLabels); a swept tool leaves both.
type metrics struct {
	calls     *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	pageMsgs  *prometheus.CounterVec
	inFlight  *prometheus.GaugeVec
	mu        sync.Mutex
	toolNames map[string]map[string]time.Time   // app → tool label value → last seen in a manifest or call
	callCtr   map[callLabels]prometheus.Counter // guarded by mu, with toolNames (sweepTools)
	latObs    map[latLabels]prometheus.Observer // guarded by mu
	pageCtr   sync.Map                          // pageLabels → prometheus.Counter
	flightG   sync.Map                          // app → prometheus.Gauge
}

type callLabels struct{ app, surface, kind, tool, status string }

type latLabels struct{ app, surface, kind, status string }

type pageLabels struct {
	app, typ string
	code     int
}

func newMetrics(reg prometheus.Registerer) *metrics {
	if reg == nil {
		return nil
	}
	m := &metrics{toolNames: map[string]map[string]time.Time{}, callCtr: map[callLabels]prometheus.Counter{},
		latObs: map[latLabels]prometheus.Observer{}}
	m.calls = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "reverbgo_toolmark_calls_total",
		Help: "Toolmark calls and describes by app, surface (api, mcp), kind, tool (\"other\" outside the manifest) and result status.",
	}, []string{"app", "surface", "kind", "tool", "status"}))
	m.latency = register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "reverbgo_toolmark_call_duration_seconds",
		Help:    "Time from the agent's request to its answer, by app, surface (api, mcp), kind and status.",
		Buckets: callBuckets,
	}, []string{"app", "surface", "kind", "status"}))
	m.pageMsgs = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "reverbgo_toolmark_page_messages_total",
		Help: "Page-to-server messages by app, type and HTTP status.",
	}, []string{"app", "type", "code"}))
	m.inFlight = register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "reverbgo_toolmark_calls_in_flight",
		Help: "Calls waiting for the page, by app.",
	}, []string{"app"}))
	return m
}

// register reuses an identical collector already registered (e.g. a second Bridge in tests).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
}

// toolLabel returns tool when it is in the manifest the call went to and the app's label budget
// allows it, else "other". The budget follows the manifests: a label not seen in a call or a
// manifest posted here for a manifest lifetime is dropped, with its series (sweepTools), so
// tools that left the manifests give their place to new ones.
func (m *metrics) toolLabel(app, tool string, inManifest bool, now time.Time) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.toolLabelLocked(app, tool, inManifest, now)
}

// toolLabelLocked is toolLabel with m.mu held.
func (m *metrics) toolLabelLocked(app, tool string, inManifest bool, now time.Time) string {
	if !inManifest {
		return "other"
	}
	set := m.toolNames[app]
	if set == nil {
		set = map[string]time.Time{}
		m.toolNames[app] = set
	}
	if _, ok := set[tool]; ok {
		set[tool] = now
		return tool
	}
	if len(set) >= maxToolLabels {
		return "other"
	}
	set[tool] = now
	return tool
}

// manifest marks the labels of a manifest's tools as still current.
func (m *metrics) manifest(app string, tools []Tool, now time.Time) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	set := m.toolNames[app]
	for _, t := range tools {
		if _, ok := set[t.Name]; ok {
			set[t.Name] = now
		}
	}
}

// sweepTools drops the tool labels last seen before cutoff and deletes their series and
// cached counters. The series are deleted with m.mu held: a call between the two could
// otherwise cache a counter for the tool that the deletion then detaches from the vector.
func (m *metrics) sweepTools(cutoff time.Time) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var gone [][2]string
	for app, set := range m.toolNames {
		for tool, seen := range set {
			if seen.Before(cutoff) {
				delete(set, tool)
				gone = append(gone, [2]string{app, tool})
			}
		}
		if len(set) == 0 {
			delete(m.toolNames, app)
		}
	}
	if len(gone) == 0 {
		return
	}
	for k := range m.callCtr {
		for _, g := range gone {
			if k.app == g[0] && k.tool == g[1] {
				delete(m.callCtr, k)
				break
			}
		}
	}
	for _, g := range gone {
		m.calls.DeletePartialMatch(prometheus.Labels{"app": g[0], "tool": g[1]})
	}
}

func (m *metrics) call(app, surface, kind, tool string, inManifest bool, status string, d time.Duration, now time.Time) {
	if m == nil {
		return
	}
	m.mu.Lock()
	ck := callLabels{app, surface, kind, m.toolLabelLocked(app, tool, inManifest, now), status}
	ctr := m.callCtr[ck]
	if ctr == nil {
		ctr = m.calls.WithLabelValues(ck.app, ck.surface, ck.kind, ck.tool, ck.status)
		m.callCtr[ck] = ctr
	}
	lk := latLabels{app, surface, kind, status}
	obs := m.latObs[lk]
	if obs == nil {
		obs = m.latency.WithLabelValues(app, surface, kind, status)
		m.latObs[lk] = obs
	}
	m.mu.Unlock()
	ctr.Inc()
	obs.Observe(d.Seconds())
}

func (m *metrics) page(app, typ string, code int) {
	if m == nil {
		return
	}
	switch typ {
	case TypeManifest, TypeChanged, TypeResult, TypeConfirmed:
	default:
		typ = "invalid"
	}
	cl := codeLabel(code)
	k := pageLabels{app, typ, code}
	if cl == "5xx" {
		k.code = 500 // one cache entry per series
	}
	if c, ok := m.pageCtr.Load(k); ok {
		c.(prometheus.Counter).Inc()
		return
	}
	c, _ := m.pageCtr.LoadOrStore(k, m.pageMsgs.WithLabelValues(app, typ, cl))
	c.(prometheus.Counter).Inc()
}

func (m *metrics) flight(app string, delta float64) {
	if m == nil {
		return
	}
	if g, ok := m.flightG.Load(app); ok {
		g.(prometheus.Gauge).Add(delta)
		return
	}
	g, _ := m.flightG.LoadOrStore(app, m.inFlight.WithLabelValues(app))
	g.(prometheus.Gauge).Add(delta)
}

func codeLabel(code int) string {
	switch code {
	case 204:
		return "204"
	case 401:
		return "401"
	case 403:
		return "403"
	case 404:
		return "404"
	case 409:
		return "409"
	case 410:
		return "410"
	case 413:
		return "413"
	case 422:
		return "422"
	case 429:
		return "429"
	default:
		return "5xx"
	}
}
