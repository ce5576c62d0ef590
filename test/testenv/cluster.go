package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	schedulerpluginsv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/progress"
	operatorwebhook "github.com/trainjob/operator/internal/webhook"
)

// Scheme knows every kind the operator works with.
var Scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(trainer.AddToScheme(s))
	utilruntime.Must(jobsetv1alpha2.AddToScheme(s))
	utilruntime.Must(schedulerpluginsv1alpha1.AddToScheme(s))
	utilruntime.Must(volcanov1beta1.AddToScheme(s))
	return s
}()

// Cluster is a started environment and a client for it.
type Cluster struct {
	Env *envtest.Environment
	// Progress tunes the progress endpoint of the managers StartManager starts; a zero Interval
	// is ProgressInterval.
	Progress progress.Options
	// Admission tunes the webhooks of the managers StartManager starts.
	Admission operatorwebhook.Options
	// metricsAddr is where the last manager StartManager started serves its metrics.
	metricsAddr string
	// Client reads from the API server, not a cache: tests see what is there.
	Client client.Client
	// Dir holds the state of the programs the cluster runs beside the API server (kubeconfigs,
	// configuration files, logs in Dir/logs); it is removed by Stop.
	Dir string
	// RealNodeJoined is how long the real node took from containerd's start to Ready, when the
	// cluster has one.
	RealNodeJoined time.Duration

	settings *settings
	procs    []*process
	// pending are the LatePrograms that have not joined yet.
	pending []LateProgram
	cleanup []func()
	// nodes counts the fake nodes added, to give each its own address.
	nodes int
	// kwokAddr is where KWOK serves the fake nodes' resource metrics, on loopback.
	kwokAddr string
	// installedRBAC holds the config/ folders whose RBAC is installed (installRBAC).
	installedRBAC map[string]bool
	// jobSetWebhookPort is where StartManager serves JobSet's webhooks beside a bare API server.
	jobSetWebhookPort int
}

// Start starts an environment made by New with opts. With WithLocalCluster, it is a whole local
// cluster: see StartLocal.
func Start(opts ...Option) (_ *Cluster, err error) {
	s := newSettings(opts)
	env, err := newEnv(s)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Env: env, settings: s}
	if c.Dir, err = os.MkdirTemp("", "trainjob-cluster-"); err != nil {
		return nil, err
	}
	if err := os.Mkdir(c.LogDir(), 0o755); err != nil {
		return nil, err
	}
	if s.audit {
		if err := c.configureAudit(); err != nil {
			return nil, err
		}
	}
	// The API server's certificates in a folder of the cluster's, which outlives a restart of the
	// API server (RestartAPIServer): the clients' kubeconfigs stay valid.
	apiServer := env.ControlPlane.GetAPIServer()
	apiServer.CertDir = filepath.Join(c.Dir, "kube-apiserver")
	if err := os.Mkdir(apiServer.CertDir, 0o700); err != nil {
		return nil, err
	}
	// A node's address, not its host name, which resolves nowhere here: for `kubectl logs` and
	// `exec`, the API server calls the real node's kubelet there.
	apiServer.Configure().Set("kubelet-preferred-address-types", "InternalIP")
	// Kubernetes' own gang scheduling (KEP-4671), alpha in 1.36: its Workload and PodGroup API,
	// and the pods' schedulingGroup, which the API server drops with the gate off.
	apiServer.Configure().Set("feature-gates", WorkloadFeatureGates).Set("runtime-config", "scheduling.k8s.io/v1alpha2=true")
	if s.local != nil && s.local.InCluster {
		if !s.local.RealNode {
			return nil, errors.New("a local cluster's in-cluster clients need its real node")
		}
		if err := configureInCluster(apiServer); err != nil {
			return nil, err
		}
	}
	if s.local != nil || s.aggregation {
		// The aggregator's client certificate, for metrics.k8s.io (metrics-server) and the
		// history's API.
		if err := configureFrontProxy(filepath.Join(c.Dir, "front-proxy"), func(name, value string) {
			apiServer.Configure().Set(name, value)
		}); err != nil {
			return nil, err
		}
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting envtest: %w (the cluster's folder is kept: %s)", err, c.Dir)
	}
	defer func() {
		if err != nil {
			c.stop()
			err = fmt.Errorf("%w (the logs of the cluster's programs are kept in %s)", err, c.LogDir())
		}
	}()
	// Tests create objects in numbers: not at client-go's default 5 queries per second.
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 500, 500
	if c.Client, err = client.New(cfg, client.Options{Scheme: Scheme}); err != nil {
		return nil, err
	}
	if hooks := &env.WebhookInstallOptions; hooks.LocalServingCertDir != "" {
		// A serving certificate signed by a CA, with the CA beside it as ca.crt, where
		// cert-manager's and the operator's own Secrets have it: the progress endpoint hands it
		// to the trainers.
		if err := issueServingCert(context.Background(), c.Client, hooks); err != nil {
			return nil, err
		}
		if s.local == nil && !s.noJobSetWebhooks {
			if err := c.moveJobSetWebhooks(context.Background()); err != nil {
				return nil, err
			}
		}
	}
	if s.local != nil {
		if err := c.startLocal(*s.local); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// WorkloadFeatureGates are the gates of Kubernetes' own gang scheduling, on in the API server and
// the scheduler: the Workload and PodGroup API and the scheduler's GangScheduling plugin.
const WorkloadFeatureGates = "GenericWorkload=true,GangScheduling=true"

// LogDir is the folder of the log files of the programs the cluster runs, one per program.
func (c *Cluster) LogDir() string { return filepath.Join(c.Dir, "logs") }

// Stop stops the programs the cluster runs, last started first, then the API server and etcd,
// and removes their state.
func (c *Cluster) Stop() {
	c.stop()
	if c.Dir != "" {
		_ = os.RemoveAll(c.Dir)
	}
}

// stop stops what runs, and leaves the state.
func (c *Cluster) stop() {
	for _, p := range slices.Backward(c.procs) {
		p.stop()
	}
	c.procs = nil
	for _, f := range slices.Backward(c.cleanup) {
		f()
	}
	c.cleanup = nil
	_ = c.Env.Stop()
}

// Install applies a kustomization folder of the repository, such as "config/runtimes".
func (c *Cluster) Install(ctx context.Context, dir string) error {
	root, err := moduleDir("")
	if err != nil {
		return err
	}
	objs, err := Kustomize(filepath.Join(root, filepath.FromSlash(dir)))
	if err != nil {
		return err
	}
	if err := Apply(ctx, c.Client, "testenv", objs...); err != nil {
		return fmt.Errorf("installing %s: %w", dir, err)
	}
	return nil
}

// InstallWhenServed installs a kustomization folder as Install does, trying again for up to 90 s
// while the API server cannot reach the operator's webhooks, which refuse everything until the
// operator serves them: just installed, its Service's endpoints may not have reached every node's
// proxy yet.
func (c *Cluster) InstallWhenServed(ctx context.Context, dir string) error {
	var err error
	_ = wait.PollUntilContextTimeout(ctx, time.Second, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		err = c.Install(ctx, dir)
		return err == nil || !strings.Contains(err.Error(), "failed calling webhook"), nil
	})
	return err
}

// Kubeconfig writes a kubeconfig of an administrator named user into the cluster's folder and
// returns its path: each program of the cluster gets its own, so that the API server's audit and
// managed fields tell them apart.
func (c *Cluster) Kubeconfig(user string) (string, error) {
	u, err := c.Env.AddUser(envtest.User{Name: user, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", fmt.Errorf("adding user %s: %w", user, err)
	}
	data, err := u.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(c.Dir, user+".kubeconfig")
	return path, os.WriteFile(path, data, 0o600)
}

// run starts a program of the cluster from the assets folder; Stop stops it.
func (c *Cluster) run(name string, env []string, args ...string) error {
	p, err := startProcess(c.LogDir(), name, env, args...)
	if err != nil {
		return err
	}
	c.procs = append(c.procs, p)
	return nil
}

// waitFor waits up to a minute for ready to be true, failing early when a program of the
// cluster exits.
func (c *Cluster) waitFor(what string, ready func() bool) error {
	deadline := time.Now().Add(time.Minute)
	for !ready() {
		for _, p := range c.procs {
			if err := p.exited(); err != nil {
				return fmt.Errorf("waiting for %s: %w", what, err)
			}
		}
		if time.Now().After(deadline) {
			return errors.New("timed out waiting for " + what)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}
