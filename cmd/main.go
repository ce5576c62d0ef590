// Command manager runs the TrainJob operator: one controller-runtime manager with the framework
// controllers, the gang-scheduling controller and the admission webhooks.
package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	schedulerpluginsv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/certs"
	"github.com/trainjob/operator/internal/controller"
	"github.com/trainjob/operator/internal/framework/torch"
	"github.com/trainjob/operator/internal/metricsauth"
	"github.com/trainjob/operator/internal/progress"
	operatorwebhook "github.com/trainjob/operator/internal/webhook"
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

// defaultCertDir is where the webhook server reads its certificate, and where the Deployment
// mounts the certificate's Secret.
const defaultCertDir = "/tmp/k8s-webhook-server/serving-certs"

func main() {
	var (
		metricsAddr, probeAddr, metricsCertPath   string
		pprofAddr                                 string
		secureMetrics, enableHTTP2                bool
		enableLeaderElection                      bool
		leaderElectionNamespace                   string
		leaseDuration, renewDeadline, retryPeriod time.Duration
		webhookHost, webhookCertPath              string
		webhookPort                               int
		certOpts                                  certs.Options
		qps                                       float64
		burst                                     int
		controllerOpts                            controller.Options
		clusterDomain                             string
		progressURL                               string
		progressOpts                              progress.Options
		webhookOpts                               operatorwebhook.Options
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0",
		"Address the metrics endpoint binds to, e.g. :8443 (HTTPS) or :8080 (HTTP); 0 disables it.")
	flag.BoolVar(&secureMetrics, "metrics-secure", true,
		"Serve metrics over HTTPS, allowing only callers authenticated and authorized by the API server.")
	flag.StringVar(&metricsCertPath, "metrics-cert-path", "",
		"Folder with the metrics server's tls.crt and tls.key; empty means a self-signed certificate.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address the healthz and readyz probes bind to.")
	flag.StringVar(&pprofAddr, "pprof-bind-address", "0",
		"Address Go's profiler (/debug/pprof) binds to, e.g. 127.0.0.1:6060; 0 disables it. It has no authentication: keep it on loopback.")
	flag.BoolVar(&enableLeaderElection, "leader-elect", false,
		"Elect a leader so that only one of several manager replicas reconciles.")
	flag.StringVar(&leaderElectionNamespace, "leader-elect-namespace", "",
		"Namespace of the leader election's Lease; empty means the namespace the manager runs in (required out of a cluster).")
	flag.DurationVar(&leaseDuration, "leader-elect-lease-duration", 15*time.Second,
		"How long replicas that do not lead wait, after the leader's last renewal, before they take the lead: the longest takeover after a leader dies.")
	flag.DurationVar(&renewDeadline, "leader-elect-renew-deadline", 10*time.Second,
		"How long the leader tries to renew its lease before it stops leading (and exits); less than the lease duration.")
	flag.DurationVar(&retryPeriod, "leader-elect-retry-period", 2*time.Second,
		"How often replicas try to take or renew the lease.")
	flag.BoolVar(&enableHTTP2, "enable-http2", false,
		"Serve metrics and webhooks over HTTP/2 too; off by default against the HTTP/2 Rapid Reset and Stream Cancellation CVEs.")
	flag.StringVar(&webhookHost, "webhook-host", "", "Address the webhook server binds to; empty means all.")
	flag.IntVar(&webhookPort, "webhook-port", 9443, "Port of the webhook server.")
	flag.StringVar(&webhookCertPath, "webhook-cert-path", "",
		"Folder with a webhook certificate made elsewhere (cert-manager); empty means the manager makes and rotates its own.")
	flag.StringVar(&certOpts.SecretName, "webhook-cert-secret", "trainjob-webhook-server-cert",
		"Secret, in the operator's namespace, that holds the certificate the manager rotates.")
	flag.StringVar(&certOpts.ServiceName, "webhook-service", "trainjob-webhook-service", "Service in front of the webhook server.")
	flag.StringVar(&certOpts.ValidatingWebhookConfiguration, "validating-webhook-configuration", "trainjob-validating-webhook-configuration",
		"ValidatingWebhookConfiguration that gets the rotated certificate's CA.")
	flag.StringVar(&certOpts.MutatingWebhookConfiguration, "mutating-webhook-configuration", "trainjob-mutating-webhook-configuration",
		"MutatingWebhookConfiguration that gets the rotated certificate's CA.")
	flag.Float64Var(&qps, "kube-api-qps", controller.DefaultKubeAPIQPS, "Queries per second the manager may send to the API server.")
	flag.IntVar(&burst, "kube-api-burst", controller.DefaultKubeAPIBurst, "Burst of queries the manager may send to the API server.")
	flag.IntVar(&controllerOpts.MaxConcurrentReconciles, "trainjob-concurrency", controller.DefaultMaxConcurrentReconciles,
		"Number of TrainJobs each framework controller reconciles at once.")
	flag.DurationVar(&controllerOpts.RuntimeGracePeriod, "runtime-grace-period", controller.DefaultRuntimeGracePeriod,
		"How long a new TrainJob waits for a missing runtime to appear before it is marked Failed.")
	controllerOpts.Conditions = controller.UpstreamConditions
	controllerOpts.Events = controller.AllEvents
	flag.Var(&controllerOpts.Conditions, "conditions",
		"Which conditions TrainJobs get: upstream (upstream Kubeflow Trainer's, which its Python SDK reads: Suspended, Complete, Failed, and Created=False while the JobSet cannot be made) or all (also Created=True, Running, and Suspended=False after a resume). status.state is written in both.")
	flag.Var(&controllerOpts.Events, "events",
		"Which events the controllers write about TrainJobs: all (every transition: the JobSet made, running, suspended, resumed, finished, resized) or warnings (only what went wrong: refusals, failures, stalls, restarts; a TrainJob that runs well then costs no event write, and its status still says every transition).")
	flag.StringVar(&progressURL, "progress-url", "",
		"Base URL the trainers reach the webhook server at, to report progress; empty means https://<webhook-service>.<namespace>.svc.")
	flag.DurationVar(&progressOpts.Interval, "progress-interval", progress.DefaultInterval,
		"Least time between two writes of one TrainJob's reported progress; the latest report wins.")
	flag.Float64Var(&progressOpts.QPS, "progress-qps", progress.DefaultQPS,
		"Writes of reported progress per second, for all TrainJobs together.")
	flag.StringVar(&clusterDomain, "cluster-domain", torch.DefaultClusterDomain,
		"The cluster's DNS domain (the kubelets' clusterDomain): the end of the pods' fully qualified names, on which an elastic torch TrainJob's first pod hosts its rendezvous.")
	opts := zap.Options{}
	flag.BoolVar(&webhookOpts.History, "history", false,
		"Give each new TrainJob the history's finalizer, so that none is gone before the history has recorded how it ended. Set it where the history runs (config/history): without the history, such a TrainJob is never deleted.")
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	// Under the container's memory limit, which the install passes as MEMORY_LIMIT, unless
	// GOMEMLIMIT says otherwise (controller.SoftMemoryLimit).
	if limit, ok := controller.SoftMemoryLimit(os.Getenv("MEMORY_LIMIT")); ok && os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(limit)
		setupLog.Info("Keeping the heap under the container's memory limit", "softLimitBytes", limit)
	}
	if errs := validation.IsDNS1123Subdomain(clusterDomain); len(errs) > 0 {
		exitOn(errors.New(strings.Join(errs, "; ")), "--cluster-domain must be a DNS domain such as cluster.local")
	}
	// The Kubebuilder convention: ENABLE_WEBHOOKS=false runs the manager without webhooks.
	enableWebhooks := os.Getenv("ENABLE_WEBHOOKS") != "false"
	certOpts.Namespace = os.Getenv("POD_NAMESPACE")
	certOpts.CertDir = defaultCertDir
	if webhookCertPath != "" {
		certOpts.CertDir = webhookCertPath
	}

	var tlsOpts []func(*tls.Config)
	if !enableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	metricsOpts := metricsserver.Options{
		BindAddress: metricsAddr, SecureServing: secureMetrics, TLSOpts: tlsOpts, CertDir: metricsCertPath,
	}
	if secureMetrics {
		metricsOpts.FilterProvider = metricsauth.Filter
	}

	if enableWebhooks {
		// The trainers report progress to the webhook server, over its certificate.
		if progressURL == "" {
			progressURL = fmt.Sprintf("https://%s.%s.svc", certOpts.ServiceName, certOpts.Namespace)
		}
		controllerOpts.Progress = &progress.Endpoint{URL: progressURL, CAFile: filepath.Join(certOpts.CertDir, "ca.crt")}
		controllerOpts.ProgressInterval = progressOpts.Interval
	}

	cfg := ctrl.GetConfigOrDie()
	cfg.QPS, cfg.Burst = float32(qps), burst
	// One budget for every client the manager makes from cfg, not one each.
	cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst)
	cacheOpts, err := controller.CacheOptions(cfg, scheme)
	exitOn(err, "Unable to read which PodGroup CRDs are installed")
	mgrOpts := ctrl.Options{
		Scheme: scheme,
		Cache:  cacheOpts,
		// Its informers of custom resources decode their watches with less work.
		NewCache: controller.NewCache,
		Metrics:  metricsOpts,
		WebhookServer: operatorwebhook.NewServer(webhook.Options{
			Host: webhookHost, Port: webhookPort, CertDir: certOpts.CertDir, TLSOpts: tlsOpts,
		}, operatorwebhook.Drain),
		HealthProbeBindAddress:  probeAddr,
		PprofBindAddress:        pprofAddr,
		LeaderElection:          enableLeaderElection,
		LeaderElectionID:        "trainjob-operator.trainer.kubeflow.org",
		LeaderElectionNamespace: leaderElectionNamespace,
		LeaseDuration:           &leaseDuration,
		RenewDeadline:           &renewDeadline,
		RetryPeriod:             &retryPeriod,
		// The manager exits right after its controllers stop, so the lease can be handed over at
		// once instead of after it expires.
		LeaderElectionReleaseOnCancel: true,
		// Within the pod's terminationGracePeriodSeconds (20) after its preStop sleep (5), so
		// that the lease is released rather than left to expire.
		GracefulShutdownTimeout: ptr.To(10 * time.Second),
	}
	var mgr ctrl.Manager
	exitOn(controller.RetryStartup(setupLog, "creating the manager", func() (err error) {
		mgr, err = ctrl.NewManager(cfg, mgrOpts)
		return err
	}), "Unable to create manager")

	ctx := ctrl.SetupSignalHandler()
	exitOn(controller.Setup(ctx, mgr, controller.Frameworks(clusterDomain), controllerOpts), "Unable to set up the TrainJob controllers")
	ready := healthz.Ping
	if enableWebhooks {
		certsReady := certs.Provided()
		if webhookCertPath == "" {
			certsReady, err = certs.Rotate(mgr, certOpts)
			exitOn(err, "Unable to set up webhook certificates")
		}
		ready = operatorwebhook.SetupWhenReady(mgr, controller.Frameworks(clusterDomain), webhookOpts, certsReady,
			func(mgr ctrl.Manager) error { return progress.Setup(mgr, progressOpts) })
	}
	exitOn(mgr.AddHealthzCheck("healthz", healthz.Ping), "Unable to set up health check")
	exitOn(mgr.AddReadyzCheck("readyz", ready), "Unable to set up ready check")
	exitOn(mgr.AddReadyzCheck("caches", controller.CachesSynced(ctx, mgr.GetCache())), "Unable to set up ready check")

	setupLog.Info("Starting manager", "webhooks", enableWebhooks)
	exitOn(mgr.Start(ctx), "Manager stopped with an error")
}

func exitOn(err error, msg string) {
	if err != nil {
		setupLog.Error(err, msg)
		os.Exit(1)
	}
}
