// Package webhook runs the manager with its admission webhooks served, registered with a real
// kube-apiserver, and checks what `kubectl apply` gets back: bad TrainJobs and runtimes rejected
// with the field and the reason, good ones accepted, runtimes defaulted, and updates allowed or
// refused as the TrainJob's state says.
package webhook

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	schedulerpluginsv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/controller"
	"github.com/trainjob/operator/test/testenv"
)

var (
	k8sClient client.Client
	restCfg   *rest.Config
	scheme    = runtime.NewScheme()
)

func TestMain(m *testing.M) {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(trainer.AddToScheme(scheme))
	utilruntime.Must(jobsetv1alpha2.AddToScheme(scheme))
	utilruntime.Must(schedulerpluginsv1alpha1.AddToScheme(scheme))
	utilruntime.Must(volcanov1beta1.AddToScheme(scheme))
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	env, err := testenv.New(testenv.WithWebhooks)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if restCfg, err = env.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "starting envtest:", err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	stop, err := testenv.StartManager(env, scheme, controller.Options{MaxConcurrentReconciles: 2})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stop()
	if k8sClient, err = client.New(restCfg, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The shipped runtimes go through the webhooks too: they must be accepted.
	objs, err := testenv.Kustomize(filepath.Join("..", "..", "..", "config", "runtimes"))
	if err == nil {
		err = testenv.Apply(context.Background(), k8sClient, "test", objs...)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "installing the shipped runtimes:", err)
		return 1
	}
	return m.Run()
}

func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "webhook-"}}
	require.NoError(t, k8sClient.Create(context.Background(), ns))
	return ns.Name
}

const (
	timeout  = 20 * time.Second
	interval = 50 * time.Millisecond
)

func isConflict(err error) bool { return apierrors.IsConflict(err) }
