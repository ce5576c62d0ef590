package controller

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/progress"
	utiltesting "github.com/trainjob/operator/internal/testing"
)

// clientFrom is an HTTP client whose connections come from the given loopback address, as a pod
// of its own would.
func clientFrom(ip string) *http.Client {
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: dialer.DialContext, MaxIdleConnsPerHost: 64}}
}

// post sends a progress report with the token and returns the answer's status code.
func post(ctx context.Context, c *http.Client, url, token string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewBufferString(`{"trainerStatus":{"progressPercentage":42}}`))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return resp.StatusCode, nil
}

// TestAFloodOfFakeTokensDoesNotStopARealTrainersReport: a pod sends thousands of reports with
// made-up tokens, each one a TokenReview the endpoint would ask for, as fast as it can. The
// endpoint spends a few reviews on it and refuses the rest at once (429), and a real trainer of
// another pod reports meanwhile, accepted at once; its TrainJob's status gets the report. The
// reviews go to a real API server, with a real service account token of the TrainJob's audience.
func TestAFloodOfFakeTokensDoesNotStopARealTrainersReport(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := utiltesting.NewNamespace(t, k8sClient, "progress")
	tj := utiltesting.MakeTrainJob("mnist", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch-distributed").Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "trainer", Namespace: ns}}
	require.NoError(t, k8sClient.Create(ctx, sa))
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences: []string{progress.Audience(ns, tj.Name)}, ExpirationSeconds: ptr.To[int64](3600),
	}}
	require.NoError(t, k8sClient.SubResource("token").Create(ctx, sa, req))

	server := progress.NewServer(k8sClient, progress.Options{Interval: time.Second})
	go func() { _ = server.Start(ctx) }()
	mux := http.NewServeMux()
	mux.Handle(progress.Pattern, server)
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ts := httptest.NewUnstartedServer(mux)
	ts.Listener = listener
	ts.Start()
	defer ts.Close()
	url := ts.URL + progress.Path(ns, tj.Name)

	// The flood: 2,000 distinct made-up tokens from 127.0.0.2, 500 at a time.
	attacker := clientFrom("127.0.0.2")
	var codes sync.Map
	var sent atomic.Int64
	var wg sync.WaitGroup
	for w := range 500 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 4 {
				code, err := post(ctx, attacker, url, fmt.Sprintf("made-up-%d-%d", w, i))
				if err != nil {
					code = -1
				}
				n, _ := codes.LoadOrStore(code, new(atomic.Int64))
				n.(*atomic.Int64).Add(1)
				sent.Add(1)
			}
		}()
	}
	require.Eventually(t, func() bool { return sent.Load() >= 200 }, 30*time.Second, 10*time.Millisecond, "the flood did not start")

	// The real trainer, from another pod, mid-flood.
	start := time.Now()
	code, err := post(ctx, clientFrom("127.0.0.1"), url, req.Status.Token)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, code, "the real trainer's report was refused during the flood")
	assert.Less(t, time.Since(start), 5*time.Second, "the real trainer's report waited behind the flood")
	wg.Wait()

	count := func(code int) int64 {
		if n, ok := codes.Load(code); ok {
			return n.(*atomic.Int64).Load()
		}
		return 0
	}
	assert.Greater(t, count(http.StatusTooManyRequests), int64(1900), "the flood was not refused at once")
	assert.Equal(t, int64(2000), count(http.StatusTooManyRequests)+count(http.StatusUnauthorized), "every made-up token is refused")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := &trainer.TrainJob{}
		require.NoError(c, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), got))
		if assert.NotNil(c, got.Status.TrainerStatus) {
			assert.Equal(c, ptr.To[int32](42), got.Status.TrainerStatus.ProgressPercentage)
		}
	}, 20*time.Second, 100*time.Millisecond)
}
