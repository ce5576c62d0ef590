// Package webhook runs the manager with its admission webhooks served, registered with a real
// kube-apiserver, and checks what `kubectl apply` gets back: bad TrainJobs and runtimes rejected
// with the field and the reason, good ones accepted, runtimes defaulted, and updates allowed or
// refused as the TrainJob's state says.
package webhook

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/trainjob/operator/internal/controller"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

var (
	k8sClient client.Client
	restCfg   *rest.Config
	cluster   *testenv.Cluster
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	var err error
	cluster, err = testenv.Start(testenv.WithWebhooks)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cluster.Stop()
	stop, err := cluster.StartManager(controller.Options{MaxConcurrentReconciles: 2})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stop()
	k8sClient, restCfg = cluster.Client, cluster.Env.Config
	// The shipped runtimes go through the webhooks too: they must be accepted.
	if err := cluster.Install(context.Background(), "config/runtimes"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

func newNamespace(t *testing.T) string { return utiltesting.NewNamespace(t, k8sClient, "webhook") }

const (
	timeout  = 20 * time.Second
	interval = 50 * time.Millisecond
)

func isConflict(err error) bool { return apierrors.IsConflict(err) }
