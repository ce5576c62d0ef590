// Command manager runs the TrainJob operator: one controller-runtime manager with the framework
// controllers, the gang-scheduling controller and the admission webhooks.
package main

import (
	"crypto/tls"
	"flag"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	schedulerpluginsv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/controller"
)

var (
	scheme   = runtime.NewScheme()
	setupLog = ctrl.Log.WithName("setup")
)

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(trainer.AddToScheme(scheme))
	utilruntime.Must(jobsetv1alpha2.AddToScheme(scheme))
	utilruntime.Must(schedulerpluginsv1alpha1.AddToScheme(scheme))
	utilruntime.Must(volcanov1beta1.AddToScheme(scheme))
}

func main() {
	var (
		metricsAddr, probeAddr           string
		secureMetrics, enableHTTP2       bool
		enableLeaderElection             bool
		leaderElectionNamespace          string
		webhookCertPath, metricsCertPath string
		qps                              float64
		burst                            int
		controllerOpts                   controller.Options
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0",
		"Address the metrics endpoint binds to, e.g. :8443 (HTTPS) or :8080 (HTTP); 0 disables it.")
	flag.BoolVar(&secureMetrics, "metrics-secure", true,
		"Serve metrics over HTTPS, allowing only callers authenticated and authorized by the API server.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address the healthz and readyz probes bind to.")
	flag.BoolVar(&enableLeaderElection, "leader-elect", false,
		"Elect a leader so that only one of several manager replicas is active.")
	flag.StringVar(&leaderElectionNamespace, "leader-election-namespace", "",
		"Namespace of the leader election lease; empty means the manager's own namespace.")
	flag.BoolVar(&enableHTTP2, "enable-http2", false,
		"Serve metrics and webhooks over HTTP/2 too; off by default against the HTTP/2 Rapid Reset and Stream Cancellation CVEs.")
	flag.StringVar(&webhookCertPath, "webhook-cert-path", "", "Folder with the webhook server's tls.crt and tls.key.")
	flag.StringVar(&metricsCertPath, "metrics-cert-path", "",
		"Folder with the metrics server's tls.crt and tls.key; empty means a self-signed certificate.")
	flag.Float64Var(&qps, "kube-api-qps", 500, "Queries per second the manager may send to the API server.")
	flag.IntVar(&burst, "kube-api-burst", 500, "Burst of queries the manager may send to the API server.")
	flag.IntVar(&controllerOpts.MaxConcurrentReconciles, "trainjob-concurrency", 16,
		"Number of TrainJobs each framework controller reconciles at once.")
	flag.DurationVar(&controllerOpts.RuntimeGracePeriod, "runtime-grace-period", 10*time.Second,
		"How long a new TrainJob waits for a missing runtime to appear before it is marked Failed.")
	opts := zap.Options{Development: false}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))

	var tlsOpts []func(*tls.Config)
	if !enableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}

	metricsOpts := metricsserver.Options{
		BindAddress:   metricsAddr,
		SecureServing: secureMetrics,
		TLSOpts:       tlsOpts,
		CertDir:       metricsCertPath,
	}
	if secureMetrics {
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}

	cfg := ctrl.GetConfigOrDie()
	cfg.QPS = float32(qps)
	cfg.Burst = burst

	cacheOpts, err := controller.CacheOptions(cfg, scheme)
	if err != nil {
		setupLog.Error(err, "Unable to read which PodGroup CRDs are installed")
		os.Exit(1)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Cache:                   cacheOpts,
		Metrics:                 metricsOpts,
		WebhookServer:           webhook.NewServer(webhook.Options{TLSOpts: tlsOpts, CertDir: webhookCertPath}),
		HealthProbeBindAddress:  probeAddr,
		LeaderElection:          enableLeaderElection,
		LeaderElectionID:        "trainjob-operator.trainer.kubeflow.org",
		LeaderElectionNamespace: leaderElectionNamespace,
		// The manager exits right after its controllers stop, so the lease can be handed over at
		// once instead of after it expires.
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		setupLog.Error(err, "Unable to create manager")
		os.Exit(1)
	}

	ctx := ctrl.SetupSignalHandler()
	if err := controller.Setup(ctx, mgr, controller.Frameworks(), controllerOpts); err != nil {
		setupLog.Error(err, "Unable to set up the TrainJob controllers")
		os.Exit(1)
	}

	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		setupLog.Error(err, "Unable to set up health check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		setupLog.Error(err, "Unable to set up ready check")
		os.Exit(1)
	}

	setupLog.Info("Starting manager")
	if err := mgr.Start(ctx); err != nil {
		setupLog.Error(err, "Manager stopped with an error")
		os.Exit(1)
	}
}
