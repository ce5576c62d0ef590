package webhook

import (
	"context"
	"net/http"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// maxAdmission is the longest the API server waits for an admission webhook (its timeoutSeconds
// may be at most 30).
const maxAdmission = 30 * time.Second

// NewServer is controller-runtime's webhook server, but for the admissions in flight when it is
// stopped: they are finished, not failed. Its server hands each request its own context, which is
// cancelled when the server is told to stop (the last of the manager's parts to stop), and then
// waits for the requests in flight; so an admission that was reading a runtime when a rolling
// upgrade stopped the old pod was refused ("context canceled"). An admission's context now ends
// with the deadline the API server sent with it instead: ours are given its default of 10 s (the
// Jobs' 5 s), as long as the manager's graceful shutdown. Other handlers on the server (the trainers'
// progress endpoint) keep the server's context: they answer clients that retry.
func NewServer(opts webhook.Options) webhook.Server {
	return server{webhook.NewServer(opts)}
}

type server struct{ webhook.Server }

func (s server) Register(path string, hook http.Handler) {
	if _, ok := hook.(*admission.Webhook); ok {
		hook = finishInFlight(hook)
	}
	s.Server.Register(path, hook)
}

// finishInFlight gives each request a context that the server's stop does not cancel, with the
// deadline the API server gives its webhook calls (the timeout query parameter, in whole
// seconds), at most maxAdmission.
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
