package bench

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/controller"
	"github.com/trainjob/operator/internal/progress"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

var (
	progressTrainJobs = flag.Int("progress-trainjobs", 1000, "TrainJobs whose pods report progress")
	progressPods      = flag.Int("progress-pods", 10, "pods per TrainJob that report")
	progressEvery     = flag.Duration("progress-every", 10*time.Second, "how often each pod reports")
	progressFor       = flag.Duration("progress-for", time.Minute, "how long the pods report, after as long idle for the floor")
)

// BenchmarkProgress measures what the trainers' progress reports cost the API server: every pod
// of every TrainJob posts a report every -progress-every, each with its TrainJob's token, to a
// manager with the progress endpoint's defaults. The floor is the same cluster, with the same
// TrainJobs and the same manager, idle for as long: the API server's CPU and requests then are
// what it costs anyway.
func BenchmarkProgress(b *testing.B) {
	ctx := context.Background()
	cluster, fail := startCluster(b, testenv.WithWebhooks)
	defer cluster.Stop()
	cluster.Progress = progress.Options{Interval: progress.DefaultInterval, QPS: progress.DefaultQPS}
	stop, err := cluster.StartManager(controller.Options{})
	if err != nil {
		fail(err)
	}
	defer stop()

	// The TrainJobs, and a token of each one's audience, as the kubelet would project it.
	const ns = "bench"
	c := cluster.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		fail(err)
	}
	if err := c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}}); err != nil {
		fail(err)
	}
	if err := c.Create(ctx, utiltesting.ClusterTrainingRuntime("plain", utiltesting.MakeRuntimeSpec().Obj())); err != nil {
		fail(err)
	}
	cs, err := kubernetes.NewForConfig(cluster.Env.Config)
	if err != nil {
		fail(err)
	}
	tokens := make([]string, *progressTrainJobs)
	names := make([]string, *progressTrainJobs)
	for i := range tokens {
		names[i] = fmt.Sprintf("tj-%d", i)
		tj := utiltesting.MakeTrainJob(names[i], ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, "plain").Obj()
		if err := c.Create(ctx, tj); err != nil {
			fail(err)
		}
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "default", &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{Audiences: []string{progress.Audience(ns, names[i])}, ExpirationSeconds: ptr.To[int64](3600)},
		}, metav1.CreateOptions{})
		if err != nil {
			fail(err)
		}
		tokens[i] = tr.Status.Token
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(cluster.Env.WebhookInstallOptions.LocalServingCAData)
	httpClient := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots}, MaxIdleConnsPerHost: 256,
		// The pods share this process's files with the manager: a connection each would use them up.
		MaxConnsPerHost: 256,
	}}

	cp, err := findControlPlane(cluster)
	if err != nil {
		fail(err)
	}
	time.Sleep(5 * time.Second) // The manager settles the TrainJobs' JobSets.
	idleStart, err := cp.sample(ctx)
	if err != nil {
		fail(err)
	}
	time.Sleep(*progressFor)
	idleEnd, err := cp.sample(ctx)
	if err != nil {
		fail(err)
	}

	var sent, ok, failed atomic.Int64
	var codesMu sync.Mutex
	codes := map[int]int{}
	reportCtx, cancel := context.WithTimeout(ctx, *progressFor)
	defer cancel()
	var wg sync.WaitGroup
	for i := range *progressTrainJobs {
		url := cluster.WebhookURL() + progress.Path(ns, names[i])
		for range *progressPods {
			wg.Go(func() {
				time.Sleep(rand.N(*progressEvery)) // Pods start at different times.
				tick := time.NewTicker(*progressEvery)
				defer tick.Stop()
				for percent := 1; ; percent++ {
					body := fmt.Sprintf(`{"trainerStatus":{"progressPercentage":%d,"metrics":[{"name":"loss","value":"0.%d"}]}}`, percent%101, percent)
					req, _ := http.NewRequestWithContext(reportCtx, http.MethodPost, url, strings.NewReader(body))
					req.Header.Set("Authorization", "Bearer "+tokens[i])
					sent.Add(1)
					resp, err := httpClient.Do(req)
					switch {
					case err != nil && reportCtx.Err() != nil:
						sent.Add(-1) // Cut off by the end of the run, not refused.
					case err != nil:
						failed.Add(1)
					case resp.StatusCode == http.StatusOK:
						ok.Add(1)
					default:
						codesMu.Lock()
						codes[resp.StatusCode]++
						codesMu.Unlock()
					}
					if err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						_ = resp.Body.Close()
					}
					select {
					case <-reportCtx.Done():
						return
					case <-tick.C:
					}
				}
			})
		}
	}
	reportStart, err := cp.sample(ctx)
	if err != nil {
		fail(err)
	}
	wg.Wait()
	reportEnd, err := cp.sample(ctx)
	if err != nil {
		fail(err)
	}

	seconds := progressFor.Seconds()
	idle, busy := idleEnd.requestsSince(idleStart), reportEnd.requestsSince(reportStart)
	idleCPU, busyCPU := (idleEnd.apiCPU-idleStart.apiCPU).Seconds()/seconds, (reportEnd.apiCPU-reportStart.apiCPU).Seconds()/seconds
	b.ReportMetric(float64(ok.Load())/seconds, "reports/s")
	b.ReportMetric(busy.total()/seconds, "api-requests/s")
	b.ReportMetric(busyCPU-idleCPU, "api-cpu-cores-added")

	out := tabwriter.NewWriter(os.Stdout, 2, 8, 2, ' ', 0)
	fmt.Fprintf(out, "\n%d TrainJobs x %d pods reporting every %s for %s (progress interval %s, %d writes/s at most)\n",
		*progressTrainJobs, *progressPods, *progressEvery, *progressFor, progress.DefaultInterval, progress.DefaultQPS)
	fmt.Fprintf(out, "  reports sent\t%d\t(%.0f/s)\taccepted\t%d\trefused, by code\t%v\tfailed\t%d\n",
		sent.Load(), float64(sent.Load())/seconds, ok.Load(), codes, failed.Load())
	fmt.Fprintf(out, "  API server CPU, cores\tidle (floor)\t%.3f\treporting\t%.3f\n", idleCPU, busyCPU)
	fmt.Fprintf(out, "  API requests per second\tidle (floor)\treporting\t\n")
	both := requests{}
	for _, rs := range []requests{idle, busy} {
		for k, v := range rs {
			both[k] += v
		}
	}
	for _, k := range both.kinds() {
		fmt.Fprintf(out, "    %s\t%.2f\t%.2f\t\n", k, idle[k]/seconds, busy[k]/seconds)
	}
	_ = out.Flush()
}
