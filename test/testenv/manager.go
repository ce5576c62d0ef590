package testenv

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	jobsetfeatures "sigs.k8s.io/jobset/pkg/features"
	jobsetwebhooks "sigs.k8s.io/jobset/pkg/webhooks"

	"github.com/trainjob/operator/internal/controller"
	"github.com/trainjob/operator/internal/progress"
	operatorwebhook "github.com/trainjob/operator/internal/webhook"
)

// StartManager starts the operator's manager as cmd/main.go builds it, with every controller,
// against a started environment, as the installed operator's ServiceAccount with its shipped
// RBAC (OperatorConfig), and waits for its cache. When the environment has webhooks
// (WithWebhooks), the manager serves them, and StartManager waits until it does. Beside a bare
// API server, where no JobSet controller runs, the manager serves JobSet's webhooks as well. The returned
// function stops the manager and waits until it has. Controllers may be registered again in the
// same process, so a test can restart the manager. cacheEdits change the cache's options, to
// make the cache miss what a test needs it to.
func (c *Cluster) StartManager(opts controller.Options, cacheEdits ...func(*cache.Options)) (func(), error) {
	env := c.Env
	// As the installed operator, with its RBAC and no more; at the client rate of cmd/main.go's
	// defaults, not client-go's 5 queries per second.
	cfg, err := c.OperatorConfig(context.Background())
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = controller.DefaultKubeAPIQPS, controller.DefaultKubeAPIBurst
	cacheOpts, err := controller.CacheOptions(cfg, Scheme)
	if err != nil {
		return nil, err
	}
	for _, edit := range cacheEdits {
		edit(&cacheOpts)
	}
	hooks := env.WebhookInstallOptions
	if c.metricsAddr, err = FreeAddr(); err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:   Scheme,
		Cache:    cacheOpts,
		NewCache: controller.NewCache,
		// Over plain HTTP on loopback, for the tests to scrape; the install serves it over HTTPS
		// to authorized callers only.
		Metrics: metricsserver.Options{BindAddress: c.metricsAddr},
		// A test's manager has nothing to finish: a long graceful shutdown only slows the suite.
		GracefulShutdownTimeout: ptr.To(time.Second),
		WebhookServer: operatorwebhook.NewServer(webhook.Options{
			Host: hooks.LocalServingHost, Port: hooks.LocalServingPort, CertDir: hooks.LocalServingCertDir,
		}, 0),
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	opts.SkipNameValidation = true
	if c.settings.webhooks {
		opts.Progress = &progress.Endpoint{URL: c.WebhookURL(), CAFile: filepath.Join(hooks.LocalServingCertDir, "ca.crt")}
		opts.ProgressInterval = cmp.Or(c.Progress.Interval, ProgressInterval)
	}
	if err := controller.Setup(ctx, mgr, controller.Frameworks(""), opts); err != nil {
		cancel()
		return nil, err
	}
	if c.settings.webhooks {
		if err := operatorwebhook.Setup(mgr, controller.Frameworks(""), c.Admission); err != nil {
			cancel()
			return nil, err
		}
		po := c.Progress
		if po.Interval == 0 {
			po.Interval = ProgressInterval
		}
		if err := progress.Setup(mgr, po); err != nil {
			cancel()
			return nil, err
		}
	}
	var jobSetDone chan error
	if c.settings.local == nil {
		// As the local cluster's JobSet controller runs (jobSetFeatureGates).
		if err := jobsetfeatures.SetEnable(jobsetfeatures.ElasticJobSet, true); err != nil {
			cancel()
			return nil, err
		}
		if jobSetDone, err = c.serveJobSetWebhooks(ctx); err != nil {
			cancel()
			return nil, err
		}
	}
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	stop := func() {
		cancel()
		<-done
		if jobSetDone != nil {
			<-jobSetDone
		}
	}
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		stop()
		return nil, fmt.Errorf("the manager's cache did not sync")
	}
	// The tests scrape its metrics: its metrics server starts beside its caches, and may listen
	// after them.
	if err := c.waitFor("the manager's metrics", func() bool {
		resp, err := http.Get(c.MetricsURL())
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	}); err != nil {
		stop()
		return nil, err
	}
	if c.settings.webhooks {
		if err := waitForTLS(net.JoinHostPort(hooks.LocalServingHost, strconv.Itoa(hooks.LocalServingPort))); err != nil {
			stop()
			return nil, err
		}
	}
	return stop, nil
}

// ProgressInterval is the least time between two writes of a TrainJob's progress in the tests'
// managers, unless Cluster.Progress says otherwise: short, for the tests to see the throttled
// write.
const ProgressInterval = 2 * time.Second

// WebhookURL is the base URL of the operator's webhook server, where the progress endpoint is.
func (c *Cluster) WebhookURL() string {
	hooks := c.Env.WebhookInstallOptions
	return "https://" + net.JoinHostPort(hooks.LocalServingHost, strconv.Itoa(hooks.LocalServingPort))
}

// MetricsURL is where the manager StartManager started last serves its metrics.
func (c *Cluster) MetricsURL() string { return "http://" + c.metricsAddr + "/metrics" }

// Metrics are metric families, by name, as a scrape returns them.
type Metrics map[string]*dto.MetricFamily

// ParseMetrics reads metrics in Prometheus's text format.
func ParseMetrics(data []byte) (Metrics, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(bytes.NewReader(data))
}

// ScrapeMetrics reads the metrics of the manager StartManager started last.
func (c *Cluster) ScrapeMetrics() (Metrics, error) {
	resp, err := http.Get(c.MetricsURL())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping %s: %s: %s", c.MetricsURL(), resp.Status, data)
	}
	return ParseMetrics(data)
}

// Value sums a metric's samples whose labels include want: counters and gauges by value,
// histograms by their number of observations.
func (m Metrics) Value(name string, want map[string]string) float64 {
	var sum float64
	for _, s := range m[name].GetMetric() {
		labels := map[string]string{}
		for _, l := range s.Label {
			labels[l.GetName()] = l.GetValue()
		}
		matches := true
		for k, v := range want {
			matches = matches && labels[k] == v
		}
		if !matches {
			continue
		}
		switch {
		case s.Counter != nil:
			sum += s.Counter.GetValue()
		case s.Gauge != nil:
			sum += s.Gauge.GetValue()
		case s.Histogram != nil:
			sum += float64(s.Histogram.GetSampleCount())
		}
	}
	return sum
}

// FreeAddr returns a loopback address with a port nobody listens on.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// waitForTLS waits until a TLS server accepts connections at addr.
func waitForTLS(addr string) error {
	deadline := time.Now().Add(30 * time.Second)
	for !ServesTLS(addr) {
		if time.Now().After(deadline) {
			return fmt.Errorf("the webhook server did not start at %s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// ServesTLS reports whether a TLS server completes a handshake at addr. It trusts any
// certificate: it only looks whether something serves.
func ServesTLS(addr string) bool {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // See above.
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

// serveJobSetWebhooks serves JobSet's webhooks beside a bare API server, where no JobSet
// controller runs, at the port moveJobSetWebhooks sent them to, as an administrator, as JobSet's
// controller would: a manager of their own, which stops with ctx; done says when it has.
func (c *Cluster) serveJobSetWebhooks(ctx context.Context) (done chan error, err error) {
	hooks := c.Env.WebhookInstallOptions
	mgr, err := ctrl.NewManager(c.Env.Config, ctrl.Options{
		Scheme:  Scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		WebhookServer: webhook.NewServer(webhook.Options{
			Host: hooks.LocalServingHost, Port: c.jobSetWebhookPort, CertDir: hooks.LocalServingCertDir,
		}),
	})
	if err != nil {
		return nil, err
	}
	if err := jobsetwebhooks.Setup(mgr); err != nil {
		return nil, err
	}
	done = make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return done, waitForTLS(net.JoinHostPort(hooks.LocalServingHost, strconv.Itoa(c.jobSetWebhookPort)))
}
