package webhook

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// Drain is how long the installed manager's webhook server drains when it stops: within its
// graceful shutdown (10 s), once its controllers and caches stopped.
const Drain = 3 * time.Second

// maxAdmission is the longest the API server waits for an admission webhook (its timeoutSeconds
// may be at most 30).
const maxAdmission = 30 * time.Second

// NewServer is controller-runtime's webhook server, but for how it stops.
//
// The admissions in flight when it is stopped are finished, not failed. Its server hands each
// request its own context, which is cancelled when the server is told to stop (the last of the
// manager's parts to stop), and then waits for the requests in flight; so an admission that was
// reading a runtime when a rolling upgrade stopped the old pod was refused ("context canceled").
// An admission's context now ends with the deadline the API server sent with it instead: ours are
// given its default of 10 s (the Jobs' 5 s), as long as the manager's graceful shutdown. Other
// handlers on the server (the trainers' progress endpoint) keep the server's context: they answer
// clients that retry.
//
// And it drains before it stops: told to stop, it serves drain longer, each answer closing its
// connection (Connection: close), then closes what is left. The API server keeps the connections
// it has to a pod after the pod left its Service's endpoints, and sends admissions over them until
// they close; closed all at once while in use (the server's shutdown closes idle connections), one
// of them may be closed under a request just sent ("EOF", "broken pipe": the admission is refused).
// Closed by an answer, a connection is never reused: the API server's next request opens one to a
// pod that serves.
func NewServer(opts webhook.Options, drain time.Duration) webhook.Server {
	return &server{Server: webhook.NewServer(opts), drain: drain}
}

type server struct {
	webhook.Server
	drain    time.Duration
	draining atomic.Bool
}

func (s *server) Register(path string, hook http.Handler) {
	if _, ok := hook.(*admission.Webhook); ok {
		hook = finishInFlight(hook)
	}
	s.Server.Register(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.draining.Load() {
			w.Header().Set("Connection", "close")
		}
		hook.ServeHTTP(w, r)
	}))
}

// Start serves until ctx ends, then drains for s.drain, then stops. The manager stops its webhooks
// after its controllers and caches, and leader election after them: a leader's Lease is handed
// over s.drain later, within the manager's graceful shutdown (10 s), which cuts a drain short.
func (s *server) Start(ctx context.Context) error {
	s.draining.Store(false)
	serving, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	go func() {
		select {
		case <-ctx.Done():
		case <-serving.Done(): // it stopped on its own
			return
		}
		s.draining.Store(true)
		select {
		case <-time.After(s.drain):
		case <-serving.Done():
		}
		stop()
	}()
	return s.Server.Start(serving)
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
