// Command deflatebench measures what permessage-deflate (server.compression) costs and saves
// per delivery: the bytes a subscriber reads from its socket per delivered event and the
// server's CPU time per delivery, for a ~2 KiB Laravel-like JSON event (an Eloquent model
// serialized into the event's data string).
//
//	deflatebench run --port 16701 --pid PID --app-id bench --key bench-key --secret bench-secret \
//	    -n 1000 -m 200 --rate 20 [--offer=true]
//	deflatebench table RESULTS_ON.jsonl RESULTS_OFF.jsonl
//
// run opens -n subscribers on one channel (offering permessage-deflate unless --offer=false,
// as every browser does), then triggers -m events at --rate per second through the HTTP API
// (-n × --rate deliveries/s) and waits until every delivery arrived or nothing arrived for
// --drain. Bytes are counted on each subscriber's TCP socket (frame headers included) from
// the first trigger on; CPU is the server's utime+stime from /proc/PID/stat over the same
// window. Readable lines first, one JSON summary as the last line. table prints the medians
// of two such files (compression on, off) and their ratios.
//
// Loopback only; every loop is bounded in count and time. Exit status: 0 ok, 1 could not
// run, 2 ran but lost deliveries.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/reverbgo/reverbgo/internal/pusherclient"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: deflatebench run|table ...")
		os.Exit(1)
	}
	var err error
	code := 0
	switch os.Args[1] {
	case "run":
		code, err = run(os.Args[2:])
	case "table":
		err = table(os.Args[2:])
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "deflatebench:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

// result is run's JSON summary.
type result struct {
	Offered        bool    `json:"deflate_offered"`
	Negotiated     int     `json:"negotiated"` // subscribers whose 101 accepted permessage-deflate
	Subscribers    int     `json:"subscribers"`
	Events         int     `json:"events"`
	Rate           float64 `json:"rate"`
	EventBytes     int     `json:"event_json_bytes"` // one delivery's event JSON, uncompressed (as encoding/json writes it)
	Deliveries     int64   `json:"deliveries"`
	Lost           int64   `json:"lost"`
	WirePerDeliv   float64 `json:"wire_bytes_per_delivery"`
	DeliveriesPerS float64 `json:"deliveries_per_s"`
	ServerCPU      float64 `json:"server_cpu_s"`
	CPUPerDeliv    float64 `json:"server_cpu_us_per_delivery"`
}

// countingConn counts the bytes read from a socket into a shared counter.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// eventData is a ~2 KiB order with its items, as a Laravel broadcast serializes a model.
func eventData(id int) string {
	var items []string
	for i := range 11 {
		items = append(items, fmt.Sprintf(`{"id":%d,"order_id":%d,"sku":"SKU-%05d","name":"Widget %d","quantity":%d,"price":"19.99","created_at":"2026-12-01T20:0%d:00.000000Z"}`,
			id*10+i, id, (31*i+id)%100000, i, i%3+1, i))
	}
	return fmt.Sprintf(`{"order":{"id":%d,"user_id":812,"status":"shipped","total":"179.91","currency":"EUR","shipping_address":{"line1":"12 Rue de la Paix","city":"Paris","postcode":"75002","country":"FR"},"items":[%s],"updated_at":"2026-12-01T20:10:00.000000Z"},"socket":null}`,
		id, strings.Join(items, ","))
}

func run(args []string) (int, error) {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	host := fs.String("host", "127.0.0.1", "server address (loopback only)")
	port := fs.Int("port", 16701, "server port")
	pid := fs.Int("pid", 0, "server process id (CPU from /proc; 0 = not measured)")
	appID := fs.String("app-id", "bench", "app id")
	key := fs.String("key", "bench-key", "app key")
	secret := fs.String("secret", "bench-secret", "app secret")
	n := fs.Int("n", 1000, "subscribers")
	m := fs.Int("m", 200, "events")
	rate := fs.Float64("rate", 20, "events per second")
	offer := fs.Bool("offer", true, "offer permessage-deflate")
	drain := fs.Duration("drain", 3*time.Second, "stop after this long without a delivery")
	timeout := fs.Duration("timeout", 5*time.Minute, "hard limit")
	_ = fs.Parse(args)
	if ip := net.ParseIP(*host); ip == nil || !ip.IsLoopback() {
		return 1, fmt.Errorf("--host must be a loopback address, got %q", *host)
	}
	if *n < 1 || *n > 20000 || *m < 1 || *m > 1000000 || *rate <= 0 {
		return 1, errors.New("need 1 <= -n <= 20000, 1 <= -m <= 1000000, --rate > 0")
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	addr := net.JoinHostPort(*host, strconv.Itoa(*port))
	channel := fmt.Sprintf("deflate-bench-%d", time.Now().UnixNano())

	var wire atomic.Int64
	var deliveries atomic.Int64
	var last atomic.Int64 // unix nanoseconds of the last delivery
	dialer := websocket.Dialer{
		EnableCompression: *offer,
		HandshakeTimeout:  10 * time.Second,
		NetDialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
			c, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, network, a)
			if err != nil {
				return nil, err
			}
			return &countingConn{Conn: c, n: &wire}, nil
		},
	}
	res := result{Offered: *offer, Subscribers: *n, Events: *m, Rate: *rate}
	app := pusherclient.App{ID: *appID, Key: *key, Secret: *secret}
	var conns []*pusherclient.Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	subscribed := make(chan struct{}, *n)
	var wg sync.WaitGroup
	for i := range *n {
		c, err := pusherclient.DialWith(ctx, addr, app.Key, pusherclient.Options{
			Client: "js", Version: "8.6.0", Dialer: &dialer, Compression: *offer, Timeout: 10 * time.Second})
		if err != nil {
			return 1, fmt.Errorf("subscriber %d: %w", i, err)
		}
		if c.Compressed() {
			res.Negotiated++
		}
		conns = append(conns, c)
		if err := c.Send(pusherclient.SubscribeMessage(app, c.ID, channel, "", nil)); err != nil {
			return 1, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				_, msg, err := c.WS.ReadMessage()
				if err != nil {
					return
				}
				switch {
				case bytes.Contains(msg, []byte(`"event":"bench"`)):
					deliveries.Add(1)
					last.Store(time.Now().UnixNano())
				case bytes.Contains(msg, []byte("pusher_internal:subscription_succeeded")):
					subscribed <- struct{}{}
				case bytes.Contains(msg, []byte(`"event":"pusher:ping"`)):
					_ = c.Pong()
				}
			}
		}()
	}
	for range *n {
		select {
		case <-subscribed:
		case <-ctx.Done():
			return 1, errors.New("timed out waiting for subscriptions")
		}
	}
	fmt.Printf("%d subscribers on %s, %d negotiated permessage-deflate\n", *n, channel, res.Negotiated)

	client := &http.Client{Timeout: 10 * time.Second}
	publish := func(id int) (int, error) {
		data := eventData(id)
		st, err := pusherclient.Trigger(ctx, client, addr, app, channel, "bench", data)
		if err != nil {
			return 0, err
		}
		if st != http.StatusOK {
			return 0, fmt.Errorf("trigger: HTTP %d", st)
		}
		ev, _ := json.Marshal(map[string]string{"event": "bench", "channel": channel, "data": data})
		return len(ev), nil
	}

	wire.Store(0)
	cpu0, err := serverCPU(*pid)
	if err != nil {
		return 1, err
	}
	start := time.Now()
	interval := time.Duration(float64(time.Second) / *rate)
	published := 0
	for i := range *m {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		size, err := publish(i)
		if err != nil {
			fmt.Fprintln(os.Stderr, "deflatebench:", err)
			continue
		}
		res.EventBytes = size
		published++
	}
	expected := int64(published) * int64(*n)
	last.Store(time.Now().UnixNano())
	for deliveries.Load() < expected && time.Since(time.Unix(0, last.Load())) < *drain && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	end := time.Unix(0, last.Load())
	cpu1, err := serverCPU(*pid)
	if err != nil {
		return 1, err
	}
	res.Deliveries = deliveries.Load()
	res.Lost = expected - res.Deliveries
	if res.Deliveries > 0 {
		res.WirePerDeliv = float64(wire.Load()) / float64(res.Deliveries)
		res.DeliveriesPerS = float64(res.Deliveries) / end.Sub(start).Seconds()
		res.ServerCPU = cpu1 - cpu0
		res.CPUPerDeliv = res.ServerCPU * 1e6 / float64(res.Deliveries)
	}
	fmt.Printf("%d deliveries (%d lost) of a %d-byte event: %.0f bytes on the wire each, %.0f deliveries/s, server CPU %.2f s = %.2f µs/delivery\n",
		res.Deliveries, res.Lost, res.EventBytes, res.WirePerDeliv, res.DeliveriesPerS, res.ServerCPU, res.CPUPerDeliv)
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
	if res.Lost != 0 || published != *m {
		return 2, nil
	}
	return 0, nil
}

// serverCPU is the process's user+system CPU seconds (0 without a pid).
func serverCPU(pid int) (float64, error) {
	if pid == 0 {
		return 0, nil
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name (which may hold spaces) start after the last ')'.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0, errors.New("short /proc stat")
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	const ticks = 100 // USER_HZ on Linux
	return (utime + stime) / ticks, nil
}

// table prints the medians of two result files (on, off) and their ratios.
func table(files []string) error {
	if len(files) != 2 {
		return errors.New("usage: deflatebench table ON.jsonl OFF.jsonl")
	}
	var sides [2][]result
	for i, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			var r result
			if json.Unmarshal(sc.Bytes(), &r) == nil && r.Deliveries > 0 {
				sides[i] = append(sides[i], r)
			}
		}
		_ = fh.Close()
		if len(sides[i]) == 0 {
			return fmt.Errorf("%s: no results", f)
		}
	}
	med := func(rs []result, f func(result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	wireOf := func(r result) float64 { return r.WirePerDeliv }
	cpuOf := func(r result) float64 { return r.CPUPerDeliv }
	rateOf := func(r result) float64 { return r.DeliveriesPerS }
	on, off := sides[0], sides[1]
	fmt.Printf("| compression | runs | event JSON bytes | wire bytes/delivery | server CPU µs/delivery | deliveries/s |\n|---|---|---|---|---|---|\n")
	for _, s := range []struct {
		name string
		rs   []result
	}{{"on", on}, {"off", off}} {
		fmt.Printf("| %s | %d | %d | %.0f | %.2f | %.0f |\n", s.name, len(s.rs), s.rs[0].EventBytes, med(s.rs, wireOf), med(s.rs, cpuOf), med(s.rs, rateOf))
	}
	fmt.Printf("| on / off | | | %.3f× (target ≤ 0.35×) | %.3f× (target ≤ 1.1×) | |\n",
		med(on, wireOf)/med(off, wireOf), med(on, cpuOf)/med(off, cpuOf))
	return nil
}
