//go:build unix

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// toolName is the one tool every bench page registers.
const toolName = "bench.echo"

// The bridge's default abuse limits (bridge/limits.go). They are not configurable in YAML, so
// the load must be spread over enough sockets and conversations not to reach them.
const (
	defPageRate    = 10  // page messages per second per socket (burst 60)
	defPageBurst   = 60  //
	defCallRate    = 20  // calls per second per app/user/conversation (burst 200)
	defMaxInFlight = 100 // calls waiting per conversation
	// The MCP endpoint's default session bound per node (mcp.DefaultMaxNodeSessions).
	defMaxMCPSessions = 10000
)

// The agent's surfaces (Config.Agent).
const (
	agentCalls = "calls"
	agentMCP   = "mcp"
)

// maxCalls bounds warmup+calls so that the per-call records stay small.
const maxCalls = 20_000_000

// Config is one bench run.
type Config struct {
	Host   string
	Port   int
	Path   string // server.path prefix ("" or "/x")
	AppID  string
	Key    string
	Secret string
	User   string

	Pages    int // page sockets = conversations
	Inflight int // agent calls in flight in total (closed loop)
	Calls    int // measured calls
	Warmup   int // calls before the measured window

	Think       time.Duration // simulated tool time on the page before it POSTs the result
	ThinkJitter float64       // Think varies uniformly by ±this fraction (0..1), de-synchronising the calls
	CallTimeout time.Duration // timeout_ms sent with every call
	Timeout     time.Duration // hard limit of the whole run
	PID         int           // server process for CPU accounting (0 = none)
	// H2C is "" (HTTP/1.1 everywhere), "agent" (the agent's calls over HTTP/2 with prior
	// knowledge, the pages' POSTs over HTTP/1.1 as a browser on plain HTTP does) or "all"
	// (the pages' POSTs over h2c too, as a browser's over TLS would be HTTP/2).
	H2C string
	// Agent is how the agent calls the page's tool: "calls" (signed POST
	// /apps/{id}/toolmark/calls, the default) or "mcp" (tools/call over Streamable HTTP at
	// {path}/toolmark/mcp, one MCP session per conversation with an HS256 token of the app).
	Agent string
	// MCPResource is the aud of the MCP tokens: the server's {public_url}{path}/toolmark/mcp
	// ("" = http://{host}:{port}{path}/toolmark/mcp, run.sh's public_url).
	MCPResource string

	DialConcurrency int
	Progress        io.Writer // one line per second while calls run (nil = none)
	Dump            io.Writer // one CSV line per measured call (nil = none)
}

func (c *Config) check() error {
	switch {
	case c.Pages < 1 || c.Pages > 100_000:
		return errors.New("--pages must be 1..100000")
	case c.Inflight < 1 || c.Inflight > 100_000:
		return errors.New("--inflight must be 1..100000")
	case c.Calls < 1 || c.Warmup < 0 || c.Calls+c.Warmup > maxCalls:
		return fmt.Errorf("--calls must be >= 1 and --calls + --warmup <= %d", maxCalls)
	case c.Think < 0 || c.CallTimeout < 0 || c.Timeout <= 0:
		return errors.New("--think and --call-timeout must be >= 0, --timeout > 0")
	case c.ThinkJitter < 0 || c.ThinkJitter > 1:
		return errors.New("--think-jitter must be 0..1")
	case c.AppID == "" || c.Key == "" || c.Secret == "":
		return errors.New("--app-id, --key and --secret are required")
	case c.H2C != "" && c.H2C != "agent" && c.H2C != "all":
		return errors.New(`--h2c must be "", "agent" or "all"`)
	case c.Agent != "" && c.Agent != agentCalls && c.Agent != agentMCP:
		return errors.New(`--agent must be "calls" or "mcp"`)
	}
	if c.Agent == "" {
		c.Agent = agentCalls
	}
	if c.User == "" {
		c.User = "bench-u"
	}
	if c.DialConcurrency <= 0 {
		c.DialConcurrency = 64
	}
	if c.CallTimeout == 0 { // auto: the longest think time plus 10 s
		c.CallTimeout = time.Duration(float64(c.Think)*(1+c.ThinkJitter)) + 10*time.Second
	}
	if c.CallTimeout < time.Millisecond {
		return errors.New("--call-timeout must be >= 1ms")
	}
	return nil
}

// Result is the run's summary; main prints it as the last line, in JSON.
type Result struct {
	Mode      string  `json:"mode"`
	Agent     string  `json:"agent"`
	H2C       string  `json:"h2c,omitempty"`
	Pages     int     `json:"pages"`
	Inflight  int     `json:"inflight"`
	Warmup    int     `json:"warmup"`
	ThinkMS   float64 `json:"think_ms"`
	Jitter    float64 `json:"think_jitter"`
	Calls     int     `json:"calls"`  // measured calls attempted
	OK        int     `json:"ok"`     // measured calls answered {"status":"ok"} with the echoed input
	Errors    int     `json:"errors"` // measured calls that failed in any way
	DurationS float64 `json:"duration_s"`
	CallsPerS float64 `json:"calls_per_s"`

	// RoundTrip is the agent's wall time per call (signed POST /toolmark/calls → 200, or the
	// MCP tools/call POST → its answer read).
	RoundTrip Lat `json:"round_trip"`
	// Overhead is RoundTrip minus the page's own time (call event received → result POST
	// started, i.e. the simulated tool time plus client scheduling): what the bridge adds.
	Overhead Lat `json:"overhead"`
	// Dispatch is agent POST start → call event read by the page.
	Dispatch Lat `json:"dispatch"`
	// Return is page result POST start → agent response read.
	Return Lat `json:"return"`
	// PagePost is the page's result POST (start → 204 read).
	PagePost Lat `json:"page_post"`
	// PageThink is call event read → result POST start (tool time plus client delay).
	PageThink Lat `json:"page_think"`
	// RTMinusPage is RoundTrip − (PageThink + PagePost), the alternative definition; it
	// subtracts the server's work on the result POST too, so it understates the overhead.
	RTMinusPage Lat `json:"rt_minus_page"`
	Correlated  int `json:"correlated"` // measured calls matched to their page record by id

	ErrorKinds     map[string]int `json:"error_kinds,omitempty"`
	PageErrorKinds map[string]int `json:"page_error_kinds,omitempty"`
	Cancels        int64          `json:"cancels"`
	ErrorSamples   []string       `json:"error_samples,omitempty"`

	ServerCPUS         float64 `json:"server_cpu_s"` // -1 = unknown (no --pid)
	ServerCPUUtil      float64 `json:"server_cpu_util"`
	ServerCPUUsPerCall float64 `json:"server_cpu_us_per_call"`
	ClientCPUS         float64 `json:"client_cpu_s"`
	ClientCPUUsPerCall float64 `json:"client_cpu_us_per_call"`
	OtherCPUS          float64 `json:"other_cpu_s"`

	// Ceilings the server's default limits put on this run's shape.
	LimitPageResultsPerS int     `json:"limit_page_results_per_s"` // pages × 10
	LimitCallsPerS       int     `json:"limit_calls_per_s"`        // pages × 20
	InflightPerConv      int     `json:"inflight_per_conversation"`
	SetupS               float64 `json:"setup_s"`
}

// agentRec is the agent's view of one measured call.
type agentRec struct {
	id         string // the call id (calls API) or the echoed input (MCP, which does not return the id)
	start, end time.Duration
	ok         bool
}

type runner struct {
	cfg        Config
	hostPort   string
	base       time.Time
	agentURL   string
	agentPath  string
	pageURLs   []string
	mcpURL     string
	agentHTTP  *http.Client
	pageClient *http.Client

	stop    chan struct{} // closed when the agents are done: posters end between jobs
	cancels atomic.Int64
	done    atomic.Int64 // calls finished (warmup included), for progress

	mu        sync.Mutex
	pageErrs  map[string]int
	agentErrs map[string]int
	samples   []string
}

func (r *runner) sample(s string) {
	r.mu.Lock()
	if len(r.samples) < 10 {
		r.samples = append(r.samples, s)
	}
	r.mu.Unlock()
}

func (r *runner) agentErr(kind string) {
	r.mu.Lock()
	r.agentErrs[kind]++
	r.mu.Unlock()
}

// newTransport is a pool of n connections; with h2c it speaks only HTTP/2 with prior knowledge
// (a new connection is dialled when one's stream limit is reached).
func newTransport(n int, h2c bool) *http.Transport {
	var protos *http.Protocols
	if h2c {
		protos = new(http.Protocols)
		protos.SetUnencryptedHTTP2(true)
	}
	return &http.Transport{
		Protocols:           protos,
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        n,
		MaxIdleConnsPerHost: n,
		// Below reverbgo's ReadHeaderTimeout (10 s), which also bounds how long a new connection
		// may wait for its first request: a connection this Transport dialled but did not use
		// is closed by the server at 10 s, and a POST that picks it up just then fails with EOF
		// (a POST is not retried). Dropping idle connections sooner avoids that race.
		IdleConnTimeout:    5 * time.Second,
		DisableCompression: true,
		ForceAttemptHTTP2:  false,
	}
}

// Run sets up cfg.Pages page sockets, then drives cfg.Warmup+cfg.Calls calls through the bridge
// with cfg.Inflight agent workers, and returns the measured window's summary. The error is
// non-nil only when the run could not take place (setup failed); call failures are counted.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()

	var nonce [4]byte
	_, _ = rand.Read(nonce[:])
	tag := hex.EncodeToString(nonce[:])
	r := &runner{
		cfg:       cfg,
		hostPort:  net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port)),
		base:      time.Now(),
		stop:      make(chan struct{}),
		pageErrs:  map[string]int{},
		agentErrs: map[string]int{},
	}
	r.agentPath = "/apps/" + url.PathEscape(cfg.AppID) + "/toolmark/calls"
	r.agentURL = "http://" + r.hostPort + cfg.Path + r.agentPath
	r.mcpURL = "http://" + r.hostPort + cfg.Path + "/toolmark/mcp"
	if cfg.MCPResource == "" {
		r.cfg.MCPResource = r.mcpURL
	}
	posters := cfg.Inflight // one per call in flight, so the think time never queues
	r.agentHTTP = &http.Client{Transport: newTransport(cfg.Inflight+16, cfg.H2C != ""), Timeout: cfg.CallTimeout + 10*time.Second}
	r.pageClient = &http.Client{Transport: newTransport(posters+64, cfg.H2C == "all"), Timeout: 30 * time.Second}
	defer r.agentHTTP.CloseIdleConnections()
	defer r.pageClient.CloseIdleConnections()

	pages := make([]*page, cfg.Pages)
	r.pageURLs = make([]string, cfg.Pages)
	for i := range pages {
		conv := fmt.Sprintf("%s-%d", tag, i)
		pages[i] = &page{idx: i, conv: conv, channel: "private-toolmark." + cfg.User + "." + conv,
			clientID: fmt.Sprintf("bench-%s-%d", tag, i)}
		r.pageURLs[i] = "http://" + r.hostPort + cfg.Path + "/toolmark/bridge/" + conv
	}
	defer func() {
		for _, p := range pages {
			if p.conn != nil {
				_ = p.conn.Close()
			}
		}
		r.closeMCP(pages)
	}()

	// Setup: connect, subscribe and register every page, DialConcurrency at a time.
	setupStart := time.Now()
	{
		sem := make(chan struct{}, cfg.DialConcurrency)
		var wg sync.WaitGroup
		var firstErr error
		var emu sync.Mutex
		for _, p := range pages {
			if ctx.Err() != nil {
				break
			}
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				err := r.connect(ctx, p)
				if err == nil && r.cfg.Agent == agentMCP {
					err = r.openMCP(ctx, p)
				}
				if err != nil {
					emu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					emu.Unlock()
				}
			}()
		}
		wg.Wait()
		if firstErr == nil && ctx.Err() != nil {
			firstErr = ctx.Err()
		}
		if firstErr != nil {
			return nil, fmt.Errorf("setup: %w", firstErr)
		}
	}
	setup := time.Since(setupStart)

	// Page side: one reader per socket, a pool of posters for the result POSTs. The queue
	// holds every call that can be in flight.
	jobs := make(chan job, cfg.Inflight+cfg.Pages+1024)
	pageCtx, stopPages := context.WithCancel(ctx)
	var readers, posterWG sync.WaitGroup
	for _, p := range pages {
		readers.Add(1)
		go func() { defer readers.Done(); r.readLoop(p, jobs) }()
	}
	pageRecs := make([][]pageRec, posters)
	for i := range posters {
		posterWG.Add(1)
		go func() { defer posterWG.Done(); r.poster(pageCtx, jobs, &pageRecs[i]) }()
	}

	// Agent side: a closed loop of Inflight workers.
	total := int64(cfg.Warmup + cfg.Calls)
	var next atomic.Int64
	var meter *cpuMeter
	var meterOnce sync.Once
	startMeter := func() { meterOnce.Do(func() { meter = startCPU(cfg.PID) }) }
	if cfg.Warmup == 0 {
		startMeter()
	}
	agentRecs := make([][]agentRec, cfg.Inflight)
	var agents sync.WaitGroup
	for w := range cfg.Inflight {
		agents.Add(1)
		go func() {
			defer agents.Done()
			var body []byte
			for ctx.Err() == nil {
				idx := next.Add(1) - 1
				if idx >= total {
					return
				}
				measured := idx >= int64(cfg.Warmup)
				if idx == int64(cfg.Warmup) {
					startMeter()
				}
				p := pages[idx%int64(cfg.Pages)]
				var rec agentRec
				if p.mcp != nil {
					body, rec = r.callMCP(ctx, p, idx, body)
				} else {
					body, rec = r.call(ctx, p, idx, body)
				}
				r.done.Add(1)
				if measured {
					agentRecs[w] = append(agentRecs[w], rec)
				}
			}
		}()
	}

	progressDone := make(chan struct{})
	go r.progress(ctx, total, progressDone)
	agents.Wait()
	startMeter() // no measured call ran (cancelled): keep meter non-nil
	clientCPU, serverCPU, otherCPU := meter.stop()
	close(progressDone)

	// Let in-flight result POSTs finish (posters stop between jobs; bounded), then close the
	// sockets so the readers end.
	close(r.stop)
	waitBounded(&posterWG, 10*time.Second)
	stopPages()
	for _, p := range pages {
		_ = p.conn.Close()
	}
	waitBounded(&readers, 5*time.Second)

	res := r.summarize(agentRecs, pageRecs)
	res.Warmup = cfg.Warmup
	res.SetupS = setup.Seconds()
	res.ClientCPUS = clientCPU
	res.ServerCPUS = serverCPU
	res.OtherCPUS = otherCPU
	if res.DurationS > 0 && serverCPU >= 0 {
		res.ServerCPUUtil = serverCPU / meter.end.Sub(meter.started).Seconds()
	}
	if res.OK > 0 {
		if serverCPU >= 0 {
			res.ServerCPUUsPerCall = serverCPU * 1e6 / float64(res.OK)
		}
		res.ClientCPUUsPerCall = clientCPU * 1e6 / float64(res.OK)
	}
	return res, nil
}

func waitBounded(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
}

// progress prints one line per second until done.
func (r *runner) progress(ctx context.Context, total int64, done <-chan struct{}) {
	if r.cfg.Progress == nil {
		return
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last := int64(0)
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-t.C:
			n := r.done.Load()
			r.mu.Lock()
			errs := 0
			for _, v := range r.agentErrs {
				errs += v
			}
			r.mu.Unlock()
			fmt.Fprintf(r.cfg.Progress, "  %6.1fs  done %d/%d  %d calls/s  errors %d\n",
				time.Since(r.base).Seconds(), n, total, n-last, errs)
			last = n
		}
	}
}

// summarize joins agent and page records by call id and computes the figures.
func (r *runner) summarize(agentRecs [][]agentRec, pageRecs [][]pageRec) *Result {
	cfg := r.cfg
	res := &Result{
		Mode: "bridge", Agent: cfg.Agent, H2C: cfg.H2C, Pages: cfg.Pages, Inflight: cfg.Inflight,
		ThinkMS:              float64(cfg.Think) / float64(time.Millisecond),
		Jitter:               cfg.ThinkJitter,
		Cancels:              r.cancels.Load(),
		ServerCPUS:           -1,
		LimitPageResultsPerS: cfg.Pages * defPageRate,
		LimitCallsPerS:       cfg.Pages * defCallRate,
		InflightPerConv:      (cfg.Inflight + cfg.Pages - 1) / cfg.Pages,
	}
	byID := map[string]*pageRec{}
	for _, recs := range pageRecs {
		for i := range recs {
			if recs[i].code == http.StatusNoContent {
				byID[recs[i].id] = &recs[i]
			}
		}
	}
	if cfg.Dump != nil {
		fmt.Fprintln(cfg.Dump, "start_us,end_us,page_recv_us,page_post_start_us,page_post_end_us,overhead_us")
	}
	var rt, over, disp, ret, post, think, rtmp []time.Duration
	first, last := time.Duration(1<<62), time.Duration(0)
	for _, recs := range agentRecs {
		for _, a := range recs {
			res.Calls++
			first = min(first, a.start)
			last = max(last, a.end)
			if !a.ok {
				continue
			}
			res.OK++
			d := a.end - a.start
			rt = append(rt, d)
			pr := byID[a.id]
			if pr == nil {
				continue
			}
			res.Correlated++
			th := pr.postStart - pr.recv
			if cfg.Dump != nil {
				fmt.Fprintf(cfg.Dump, "%d,%d,%d,%d,%d,%d\n", a.start.Microseconds(), a.end.Microseconds(),
					pr.recv.Microseconds(), pr.postStart.Microseconds(), pr.postEnd.Microseconds(), (d - th).Microseconds())
			}
			think = append(think, th)
			over = append(over, d-th)
			disp = append(disp, pr.recv-a.start)
			ret = append(ret, a.end-pr.postStart)
			pp := pr.postEnd - pr.postStart
			post = append(post, pp)
			rtmp = append(rtmp, d-th-pp)
		}
	}
	res.Errors = res.Calls - res.OK
	if res.Calls > 0 && last > first {
		res.DurationS = (last - first).Seconds()
		res.CallsPerS = float64(res.OK) / res.DurationS
	}
	res.RoundTrip = summarize(rt)
	res.Overhead = summarize(over)
	res.Dispatch = summarize(disp)
	res.Return = summarize(ret)
	res.PagePost = summarize(post)
	res.PageThink = summarize(think)
	res.RTMinusPage = summarize(rtmp)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.agentErrs) > 0 {
		res.ErrorKinds = map[string]int{}
		for k, v := range r.agentErrs {
			res.ErrorKinds[k] = v
		}
	}
	if len(r.pageErrs) > 0 {
		res.PageErrorKinds = map[string]int{}
		for k, v := range r.pageErrs {
			res.PageErrorKinds[k] = v
		}
	}
	res.ErrorSamples = append([]string(nil), r.samples...)
	sort.Strings(res.ErrorSamples)
	return res
}
