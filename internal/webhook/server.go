package webhook

import (
	"context"
	"net/http"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// maxAdmission is the longest the API server waits for an admission webhook (its timeoutSeconds
// may be at most 30), and so the longest a request in flight is finished after the manager stops.
const maxAdmission = 30 * time.Second

// NewServer is controller-runtime's webhook server, but for the requests in flight when the
// manager stops: they are finished, not failed. Its server hands each request the manager's
// context, cancelled the moment the manager is told to stop, and so an admission that was reading
// a runtime when a rolling upgrade stopped the old pod was refused ("context canceled"), though
// the server waits for such requests to finish before it shuts down. Each request now has its
// own deadline instead: the one the API server sent with it, at most maxAdmission.
func NewServer(opts webhook.Options) webhook.Server {
	return server{webhook.NewServer(opts)}
}

type server struct{ webhook.Server }

func (s server) Register(path string, hook http.Handler) {
	s.Server.Register(path, finishInFlight(hook))
}

// finishInFlight gives each request a context that the server's stop does not cancel, with the
// deadline the API server gives its webhook calls (the timeout query parameter), at most
// maxAdmission.
func finishInFlight(hook http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		timeout := maxAdmission
		if d, err := time.ParseDuration(r.URL.Query().Get("timeout")); err == nil && d > 0 && d < timeout {
			timeout = d
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), timeout)
		defer cancel()
		hook.ServeHTTP(w, r.WithContext(ctx))
	})
}
