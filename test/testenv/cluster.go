package testenv

import (
	"context"
	"fmt"
	"path/filepath"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	schedulerpluginsv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	trainer "github.com/trainjob/operator/api/v1alpha1"
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
	// Client reads from the API server, not a cache: tests see what is there.
	Client client.Client
}

// Start starts an environment made by New with opts.
func Start(opts ...Option) (*Cluster, error) {
	env, err := New(opts...)
	if err != nil {
		return nil, err
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting envtest: %w", err)
	}
	// Tests create objects in numbers: not at client-go's default 5 queries per second.
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 500, 500
	c, err := client.New(cfg, client.Options{Scheme: Scheme})
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	return &Cluster{Env: env, Client: c}, nil
}

// Stop stops the environment.
func (c *Cluster) Stop() { _ = c.Env.Stop() }

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
