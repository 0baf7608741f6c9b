package benchkit

import (
	"net/http"
	"testing"
)

func TestFirstResponse(t *testing.T) {
	resp := `{"jsonrpc":"2.0","id":2,"result":{"structuredContent":{"status":"ok","data":{"seq":1}},"isError":false}}`
	tests := []struct {
		name, ct, body, want string
		err                  bool
	}{
		{"json", "application/json", resp, resp, false},
		{"sse", "text/event-stream", "event: message\nid: 1_0\ndata: " + resp + "\n\n", resp, false},
		{"sse after a notification", "text/event-stream",
			"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\ndata: " + resp + "\n\n", resp, false},
		{"sse without blank line", "text/event-stream", "data: " + resp, resp, false},
		{"sse, no response", "text/event-stream", "data: {\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n\n", "", true},
		{"other type", "text/plain", resp, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := firstResponse(http.Header{"Content-Type": {tc.ct}}, []byte(tc.body))
			if (err != nil) != tc.err || string(got) != tc.want {
				t.Fatalf("firstResponse = %s, %v", got, err)
			}
			if err != nil {
				return
			}
			r, err := DecodeMCPToolResult(got)
			if err != nil || r.Status != "ok" || string(r.Data) != `{"seq":1}` || r.IsError {
				t.Fatalf("decoded %+v %v", r, err)
			}
		})
	}
	if r, err := DecodeMCPToolResult([]byte(`{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"bad"}}`)); err != nil || r.RPCErr != "bad" {
		t.Fatalf("error response: %+v %v", r, err)
	}
}
