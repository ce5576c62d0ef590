package reliability

import (
	"context"
	"encoding/json"
	"flag"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	utiltesting "github.com/trainjob/operator/internal/testing"
)

var (
	faultTrainJobs = flag.Int("fault-trainjobs", 200, "TrainJobs submitted through the faulty API server")
	faultSeed      = flag.Uint64("fault-seed", 0, "seed of the faulty API server's faults; 0 picks one (the test logs it)")
)

// faultyAPIServer stands between the manager and the API server, over plain HTTP on loopback,
// and answers some requests itself: 429 with a Retry-After, 500, or, after a wait, 504 as an API
// server that ran out of time does. The rest it passes on, watches included.
type faultyAPIServer struct {
	url string

	mu       sync.Mutex
	random   *rand.Rand
	requests int
	faults   map[int]int // by status code
}

// The share of requests answered with each fault.
const (
	throttledShare = 0.15
	failedShare    = 0.10
	timedOutShare  = 0.03
)

func startFaultyAPIServer(t *testing.T, seed uint64) *faultyAPIServer {
	t.Helper()
	upstream, err := url.Parse(cluster.Env.Config.Host)
	require.NoError(t, err)
	// As the installed operator, with its RBAC: the manager behind the proxy sends no credentials.
	operator, err := cluster.OperatorConfig(context.Background())
	require.NoError(t, err)
	transport, err := rest.TransportFor(operator)
	require.NoError(t, err)
	f := &faultyAPIServer{random: rand.New(rand.NewPCG(seed, 1)), faults: map[int]int{}}
	proxy := httputil.NewSingleHostReverseProxy(upstream)
	proxy.Transport = transport
	proxy.FlushInterval = -1 // Watches stream.
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	server := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if code, wait := f.fault(); code != 0 {
			time.Sleep(wait)
			f.answer(w, code)
			return
		}
		proxy.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = server.Serve(listener) }()
	t.Cleanup(func() { _ = server.Close() })
	f.url = "http://" + listener.Addr().String()
	return f
}

// fault picks what to answer a request with: a status code and how long to wait first, or 0 to
// pass it on.
func (f *faultyAPIServer) fault() (int, time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests++
	code, wait := 0, time.Duration(0)
	switch p := f.random.Float64(); {
	case p < throttledShare:
		code = http.StatusTooManyRequests
	case p < throttledShare+failedShare:
		code = http.StatusInternalServerError
	case p < throttledShare+failedShare+timedOutShare:
		code, wait = http.StatusGatewayTimeout, 2*time.Second
	}
	if code != 0 {
		f.faults[code]++
	}
	return code, wait
}

// answer writes the API server's own answer for a fault: a Status, and a Retry-After when
// throttled.
func (f *faultyAPIServer) answer(w http.ResponseWriter, code int) {
	status := metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Status: metav1.StatusFailure, Code: int32(code)}
	switch code {
	case http.StatusTooManyRequests:
		status.Reason, status.Message = metav1.StatusReasonTooManyRequests, "too many requests, please try again later"
		w.Header().Set("Retry-After", "1")
	case http.StatusInternalServerError:
		status.Reason, status.Message = metav1.StatusReasonInternalError, "an error on the server has prevented the request from succeeding"
	case http.StatusGatewayTimeout:
		status.Reason, status.Message = metav1.StatusReasonTimeout, "the server was unable to return a response in the time allotted"
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(status)
}

func (f *faultyAPIServer) counts() (requests int, faults map[int]int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	faults = map[int]int{}
	for k, v := range f.faults {
		faults[k] = v
	}
	return f.requests, faults
}

// kubeconfig writes a kubeconfig that reaches the API server through f.
func (f *faultyAPIServer) kubeconfig(t *testing.T) string {
	t.Helper()
	config := clientcmdapi.NewConfig()
	config.Clusters["faulty"] = &clientcmdapi.Cluster{Server: f.url}
	config.AuthInfos["faulty"] = &clientcmdapi.AuthInfo{}
	config.Contexts["faulty"] = &clientcmdapi.Context{Cluster: "faulty", AuthInfo: "faulty"}
	config.CurrentContext = "faulty"
	path := filepath.Join(t.TempDir(), "faulty.kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*config, path))
	return path
}

// TestThrottledAndFailingCallsAreRetriedWithBackoff runs the manager against an API server that
// throttles 15% of its requests (429, Retry-After 1 s), fails 10% (500) and times 3% out (504
// after 2 s), while TrainJobs of every framework arrive: every TrainJob ends in its state, each
// child made once, and the manager's requests per TrainJob stay within what backoff allows.
func TestThrottledAndFailingCallsAreRetriedWithBackoff(t *testing.T) {
	ns := utiltesting.NewNamespace(t, k8sClient, "faults")
	createGangRuntime(t)
	seen := watchChildren(t, ns)
	seed := *faultSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (-fault-seed)", seed)
	api := startFaultyAPIServer(t, seed)
	m := startManager(t, "manager", []string{"KUBECONFIG=" + api.kubeconfig(t)})
	defer m.Stop()

	jobs := mix(*faultTrainJobs, true)
	stopCompleting := completeJobSets(ns, jobs)
	defer stopCompleting()
	require.NoError(t, submit(context.Background(), ns, jobs, 5*time.Second))
	defer func() {
		if t.Failed() {
			data, _ := os.ReadFile(m.Log())
			t.Logf("the manager (exited: %v) logged:\n%s", m.Exited(), lastLines(string(data), 10))
		}
	}()
	// Longer than the others: each controller retries its failed reconciles at 10 a second
	// (after a burst of 100), each TrainJob up to a minute apart (MaxRetryDelay), and here more
	// than a quarter of the requests fail, for 200 TrainJobs: their last retries come late (a
	// TrainJob was still retrying at the others' three minutes once in each of two sessions'
	// runs of make test-integration).
	convergedWithin(t, ns, jobs, 2*timeout)
	stopCompleting()
	require.NoError(t, m.Exited(), "the manager")
	seen.check(t, ns, jobs)

	requests, faults := api.counts()
	perTrainJob := float64(requests) / float64(len(jobs))
	t.Logf("the manager's requests: %d (%.1f per TrainJob), of which throttled %d, failed %d, timed out %d",
		requests, perTrainJob, faults[http.StatusTooManyRequests], faults[http.StatusInternalServerError], faults[http.StatusGatewayTimeout])
	assert.Less(t, perTrainJob, 50.0, "the manager sent more than 50 requests per TrainJob: retries without backoff")
	data, err := os.ReadFile(m.Log())
	require.NoError(t, err)
	assert.NotContains(t, string(data), "panic", "the manager's log")
}
