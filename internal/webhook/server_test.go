package webhook

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
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

// The server finishes the admissions in flight, through the handlers it registers; other handlers
// keep the server's context.
func TestTheServerFinishesAdmissionsOnly(t *testing.T) {
	srv := NewServer(webhook.Options{}, 0)
	var seen = map[string]error{}
	srv.Register("/admit", &admission.Webhook{Handler: admission.HandlerFunc(func(ctx context.Context, _ admission.Request) admission.Response {
		seen["/admit"] = ctx.Err()
		return admission.Allowed("")
	})})
	srv.Register("/progress", http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		seen["/progress"] = r.Context().Err()
	}))
	stopped, stop := context.WithCancel(context.Background())
	stop()
	review := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},"operation":"CREATE","object":{}}}`
	for _, path := range []string{"/admit", "/progress"} {
		req := httptest.NewRequest(http.MethodPost, path+"?timeout=5s", strings.NewReader(review)).WithContext(stopped)
		req.Header.Set("Content-Type", "application/json")
		srv.WebhookMux().ServeHTTP(httptest.NewRecorder(), req)
	}
	require.Contains(t, seen, "/admit")
	assert.NoError(t, seen["/admit"], "an admission in flight is finished")
	assert.ErrorIs(t, seen["/progress"], context.Canceled, "the progress endpoint keeps the server's context")
}

// Told to stop, the server drains: for drain longer it answers on the connections it has, each
// answer closing its connection (the API server opens its next one to a pod that serves), and
// only then stops. Before, its connections are kept alive.
func TestTheServerDrainsBeforeItStops(t *testing.T) {
	dir := t.TempDir()
	crt, key, err := certutil.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tls.crt"), crt, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tls.key"), key, 0o600))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())

	const drain = 2 * time.Second
	srv := NewServer(webhook.Options{Host: "127.0.0.1", Port: port, CertDir: dir}, drain)
	srv.Register("/admit", &admission.Webhook{Handler: admission.HandlerFunc(func(context.Context, admission.Request) admission.Response {
		return admission.Allowed("")
	})})
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // a test's own certificate
	review := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},"operation":"CREATE","object":{}}}`
	admit := func() (*http.Response, error) {
		resp, err := client.Post(fmt.Sprintf("https://127.0.0.1:%d/admit?timeout=5s", port), "application/json", strings.NewReader(review))
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}
	require.Eventually(t, func() bool { _, err := admit(); return err == nil }, 10*time.Second, 50*time.Millisecond, "the server did not serve")
	resp, err := admit()
	require.NoError(t, err)
	assert.False(t, resp.Close, "a connection closed while the server serves")

	stop()
	stopped := time.Now()
	time.Sleep(drain / 4)
	resp, err = admit()
	require.NoError(t, err, "refused while draining")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.True(t, resp.Close, "a connection kept alive while draining")
	require.NoError(t, <-done)
	assert.GreaterOrEqual(t, time.Since(stopped), drain, "stopped before draining")
}
