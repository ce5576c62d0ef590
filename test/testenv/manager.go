package testenv

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/trainjob/operator/internal/controller"
)

// StartManager starts the operator's manager as cmd/main.go builds it, with every controller,
// against cfg, and waits for its cache. The returned function stops it and waits until it has.
// Controllers may be registered again in the same process, so a test can restart the manager.
func StartManager(cfg *rest.Config, scheme *runtime.Scheme, opts controller.Options) (func(), error) {
	cacheOpts, err := controller.CacheOptions(cfg, scheme)
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  scheme,
		Cache:   cacheOpts,
		Metrics: metricsserver.Options{BindAddress: "0"},
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	opts.SkipNameValidation = true
	if err := controller.Setup(ctx, mgr, controller.Frameworks(), opts); err != nil {
		cancel()
		return nil, err
	}
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		cancel()
		return nil, fmt.Errorf("the manager's cache did not sync: %w", <-done)
	}
	return func() { cancel(); <-done }, nil
}
