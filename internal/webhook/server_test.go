package webhook

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A request in flight when the server's context is cancelled (the manager told to stop) is
// finished with a live context, under the deadline the API server sent; the server's own context
// would have failed it.
func TestRequestsInFlightOutliveTheStop(t *testing.T) {
	for name, tc := range map[string]struct {
		wrap         func(http.Handler) http.Handler
		query        string
		wantErr      error
		wantDeadline time.Duration
	}{
		"finished, with the API server's deadline":           {wrap: finishInFlight, query: "?timeout=10s", wantDeadline: 10 * time.Second},
		"no deadline sent: at most the API server's longest": {wrap: finishInFlight, wantDeadline: maxAdmission},
		"a deadline past the longest is cut to it":           {wrap: finishInFlight, query: "?timeout=2m", wantDeadline: maxAdmission},
		"unwrapped, the stop fails it": {
			wrap: func(h http.Handler) http.Handler { return h }, wantErr: context.Canceled,
		},
	} {
		t.Run(name, func(t *testing.T) {
			started, release := make(chan struct{}), make(chan struct{})
			var (
				seen     error
				deadline time.Duration
				hasOne   bool
			)
			hook := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				close(started)
				<-release
				seen = r.Context().Err()
				var at time.Time
				at, hasOne = r.Context().Deadline()
				deadline = time.Until(at)
				_, _ = io.WriteString(w, "done")
			})
			serverCtx, stop := context.WithCancel(context.Background())
			srv := httptest.NewUnstartedServer(tc.wrap(hook))
			srv.Config.BaseContext = func(net.Listener) context.Context { return serverCtx }
			srv.Start()
			defer srv.Close()

			answered := make(chan string, 1)
			go func() {
				resp, err := http.Get(srv.URL + tc.query)
				if err != nil {
					answered <- err.Error()
					return
				}
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				answered <- string(body)
			}()
			<-started
			stop()
			close(release)
			assert.Equal(t, "done", <-answered)
			require.ErrorIs(t, seen, tc.wantErr)
			if tc.wantDeadline > 0 {
				require.True(t, hasOne, "no deadline")
				assert.InDelta(t, tc.wantDeadline.Seconds(), deadline.Seconds(), 2)
			}
		})
	}
}
