package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/lesismal/nbio/nbhttp/websocket"
)

type event struct {
	Name     string          `json:"name"`
	Channels []string        `json:"channels"`
	Channel  string          `json:"channel"`
	Data     json.RawMessage `json:"data"`
}

// handleEvents is POST /apps/{id}/events. Only the app id is verified, as in rawserver.
func (s *server) handleEvents(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("id") != s.cfg.appID {
		http.Error(w, `{"error":"unknown app id"}`, http.StatusNotFound)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20+1))
	if err != nil || len(body) > 1<<20 {
		http.Error(w, `{"error":"body unreadable or over 1 MiB"}`, http.StatusBadRequest)
		return
	}
	var ev event
	if err := json.Unmarshal(body, &ev); err != nil {
		http.Error(w, `{"error":"body is not a JSON event"}`, http.StatusBadRequest)
		return
	}
	if ev.Channel != "" {
		ev.Channels = append(ev.Channels, ev.Channel)
	}
	if ev.Name == "" || len(ev.Channels) == 0 {
		http.Error(w, `{"error":"name and channels are required"}`, http.StatusBadRequest)
		return
	}
	s.triggers.Add(1)
	// Pusher sends data as a JSON string; keep a string as is, quote anything else.
	data := bytes.TrimSpace(ev.Data)
	if len(data) == 0 || data[0] != '"' {
		data, _ = json.Marshal(string(data))
	}
	name, _ := json.Marshal(ev.Name)
	var delivered, failed int64
	for _, chName := range ev.Channels {
		subs := s.subscribers(chName)
		if len(subs) == 0 {
			continue
		}
		// The message carries the channel name, so it is encoded (and framed) once per channel.
		chJSON, _ := json.Marshal(chName)
		payload := make([]byte, 0, 32+len(name)+len(chJSON)+len(data))
		payload = append(payload, `{"event":`...)
		payload = append(payload, name...)
		payload = append(payload, `,"channel":`...)
		payload = append(payload, chJSON...)
		payload = append(payload, `,"data":`...)
		payload = append(payload, data...)
		payload = append(payload, '}')
		frame := textFrame(payload)
		var dl time.Time
		if s.cfg.writeTimeout > 0 {
			dl = time.Now().Add(s.cfg.writeTimeout)
		}
		for _, c := range subs {
			if !dl.IsZero() {
				_ = c.raw.SetWriteDeadline(dl)
			}
			var err error
			if s.cfg.writeMode == "message" {
				err = c.ws.WriteMessage(websocket.TextMessage, payload)
			} else {
				// One whole frame per Write: nbio's connection writes it or queues the rest
				// under its own lock, so frames from different writers never interleave.
				_, err = c.raw.Write(frame)
			}
			if err != nil {
				failed++
				c.ws.Close() // OnClose unsubscribes it
				continue
			}
			delivered++
		}
	}
	s.deliveries.Add(delivered)
	if failed > 0 {
		s.writeErrors.Add(failed)
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, "{}")
}

// textFrame builds an unmasked, final server text frame around payload (RFC 6455 §5.2).
func textFrame(payload []byte) []byte {
	n := len(payload)
	var f []byte
	switch {
	case n < 126:
		f = make([]byte, 2, 2+n)
		f[1] = byte(n)
	case n <= 0xffff:
		f = make([]byte, 4, 4+n)
		f[1] = 126
		binary.BigEndian.PutUint16(f[2:], uint16(n))
	default:
		f = make([]byte, 10, 10+n)
		f[1] = 127
		binary.BigEndian.PutUint64(f[2:], uint64(n))
	}
	f[0] = 0x81 // FIN + text
	return append(f, payload...)
}

// decodeEnvelope decodes a client message as rawserver does (encoding/json).
func decodeEnvelope(msg []byte) (env struct {
	Event string          `json:"event"`
	Data  json.RawMessage `json:"data"`
}, ok bool) {
	return env, json.Unmarshal(msg, &env) == nil
}

// subscribeChannel returns the channel of subscribe/unsubscribe data, an object or a JSON string.
func subscribeChannel(data json.RawMessage) (string, bool) {
	if len(data) > 0 && data[0] == '"' {
		var str string
		if json.Unmarshal(data, &str) == nil {
			data = []byte(str)
		}
	}
	var d struct {
		Channel string `json:"channel"`
	}
	if json.Unmarshal(data, &d) != nil || d.Channel == "" {
		return "", false
	}
	return d.Channel, true
}

func isPublic(name string) bool {
	return !strings.HasPrefix(name, "private-") && !strings.HasPrefix(name, "presence-")
}

// subscribeReply is subscription_succeeded, or rawserver's error for a private/presence channel.
func subscribeReply(ch string, ok bool) []byte {
	var reply []byte
	if ok {
		reply, _ = json.Marshal(map[string]string{"event": "pusher_internal:subscription_succeeded",
			"channel": ch, "data": "{}"})
	} else {
		reply, _ = json.Marshal(map[string]any{"event": "pusher:subscription_error", "channel": ch,
			"data": map[string]any{"type": "NotSupported", "error": "nbioserver serves public channels only", "status": 400}})
	}
	return reply
}

type summary struct {
	Mode         string  `json:"mode"`
	Listen       string  `json:"listen"`
	StopReason   string  `json:"stop_reason"`
	UptimeS      float64 `json:"uptime_s"`
	Accepted     int64   `json:"connections_accepted"`
	Peak         int64   `json:"connections_peak"`
	Triggers     int64   `json:"trigger_requests"`
	Deliveries   int64   `json:"deliveries"`
	WriteErrors  int64   `json:"write_errors"`
	ServerCPUS   float64 `json:"cpu_s"`
	WriteTimeout float64 `json:"write_timeout_s"`
	WriteMode    string  `json:"write_mode"`
}

func randUint32() uint32 { return rand.Uint32() }

func round3(f float64) float64 { return float64(int64(f*1000+0.5)) / 1000 }

// ownCPU is this process's user+system CPU time.
func ownCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func logf(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...) }

func printJSON(v any) {
	b, _ := json.Marshal(v)
	fmt.Println(string(b))
}
