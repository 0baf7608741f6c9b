package pusher

import (
	"context"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
)

// Routes mounts the WebSocket endpoint and /up under prefix. The Pusher HTTP API is package
// api's (api.API.Routes), mounted beside it by cmd/reverbgo.
func (s *Server) Routes(e *echo.Echo, prefix string) {
	e.GET(prefix+"/app/:key", func(c echo.Context) error {
		s.ServeWS(c.Response(), c.Request(), c.Param("key"))
		return nil
	})
	e.GET(prefix+"/up", s.handleUp)
}

// healthTimeout bounds the dependency checks of /up, so a load balancer's probe gets an
// answer (DEGRADED) before its own timeout while Redis hangs.
const healthTimeout = time.Second

// handleUp answers {"health":"OK"} or, when a dependency is unreachable, 503 with
// {"health":"DEGRADED"} plus what is down. A degraded node still serves its own sockets.
// From BeginDrain on it answers 503 {"health":"draining"}.
func (s *Server) handleUp(c echo.Context) error {
	if s.leaving.Load() { // draining (drain.go): the load balancer takes the node out
		return c.JSON(http.StatusServiceUnavailable, map[string]string{"health": "draining"})
	}
	if s.health != nil {
		ctx, cancel := context.WithTimeout(c.Request().Context(), healthTimeout)
		problems := s.health(ctx)
		cancel()
		if len(problems) > 0 {
			out := map[string]string{"health": "DEGRADED"}
			for k, v := range problems {
				out[k] = v
			}
			return c.JSON(http.StatusServiceUnavailable, out)
		}
	}
	return c.JSON(http.StatusOK, map[string]string{"health": "OK"})
}
