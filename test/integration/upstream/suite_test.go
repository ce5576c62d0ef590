// Package upstream proves that upstream Kubeflow Trainer's shipped runtimes (testdata: their
// objects, field for field, written for this project) work here as they are: each applies through
// the operator's admission webhooks and is stored as written, a TrainJob of each, as the Kubeflow
// SDK writes it, is accepted and built into a JobSet the API server and JobSet's webhooks accept,
// and a torchtune TrainJob of the SDK's BuiltinTrainer gets upstream's command line. Nothing of config/runtimes is installed here:
// upstream's runtimes have the same names as the shipped ones.
package upstream

import (
	"fmt"
	"os"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/trainjob/operator/internal/controller"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

var k8sClient client.Client

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	cluster, err := testenv.Start(testenv.WithWebhooks)
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
	k8sClient = cluster.Client
	return m.Run()
}

func newNamespace(t *testing.T) string { return utiltesting.NewNamespace(t, k8sClient, "upstream") }

var polling = utiltesting.Polling{Timeout: 20 * time.Second, Interval: 50 * time.Millisecond}
