// Package controller runs the real manager, with every TrainJob controller, against a real
// kube-apiserver and kube-controller-manager's garbage collector. JobSet's controller does not run:
// the tests write JobSet status themselves, as JobSet would.
package controller

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/controller"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

// runtimeGracePeriod is short here, so that the missing-runtime tests finish quickly.
const runtimeGracePeriod = 2 * time.Second

var (
	k8sClient client.Client
	cluster   *testenv.Cluster
	// stopManager stops the manager that runs now; restartManager replaces it.
	stopManager func()
)

// startManager starts the operator's manager with the suite's settings. The suite's managers
// write all the conditions (--conditions=all), whose every transition the tests check;
// status.state, which both sets write, and upstream's set are checked by the tests that say so.
func startManager() (func(), error) {
	return cluster.StartManager(controller.Options{
		MaxConcurrentReconciles: 4,
		RuntimeGracePeriod:      runtimeGracePeriod,
		Conditions:              controller.AllConditions,
	})
}

// withManager replaces the suite's manager, for the rest of the test, with one of other options
// or cache settings; the suite's comes back when the test ends.
func withManager(t *testing.T, opts controller.Options, cacheEdits ...func(*cache.Options)) {
	t.Helper()
	stopManager()
	if opts.Conditions == "" {
		opts.Conditions = controller.AllConditions
	}
	stop, err := cluster.StartManager(opts, cacheEdits...)
	require.NoError(t, err)
	t.Cleanup(func() {
		stop()
		var err error
		stopManager, err = startManager()
		require.NoError(t, err)
	})
}

// restartManager stops the manager and starts a new one, as a rollout of the operator would.
func restartManager(t *testing.T) {
	t.Helper()
	stopManager()
	stop, err := startManager()
	require.NoError(t, err)
	stopManager = stop
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	var err error
	if cluster, err = testenv.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cluster.Stop()
	k8sClient = cluster.Client
	if err := cluster.StartGarbageCollector(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if stopManager, err = startManager(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { stopManager() }()
	if err := cluster.Install(context.Background(), "config/runtimes"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// Polling limits: everything here happens within a second or two on a quiet machine.
const (
	timeout  = 20 * time.Second
	interval = 50 * time.Millisecond
)

var polling = utiltesting.Polling{Timeout: timeout, Interval: interval}

func newNamespace(t *testing.T) string { return utiltesting.NewNamespace(t, k8sClient, "ctrl") }

// waitForTrainJob waits for the TrainJob's status to satisfy check.
func waitForTrainJob(t *testing.T, tj *trainer.TrainJob, check func(c *assert.CollectT, tj *trainer.TrainJob)) *trainer.TrainJob {
	t.Helper()
	return utiltesting.WaitFor(t, k8sClient, polling, client.ObjectKeyFromObject(tj), &trainer.TrainJob{}, check)
}

// waitForJobSet waits for the TrainJob's JobSet to exist and satisfy check.
func waitForJobSet(t *testing.T, tj *trainer.TrainJob, check func(c *assert.CollectT, js *jobsetv1alpha2.JobSet)) *jobsetv1alpha2.JobSet {
	t.Helper()
	return utiltesting.WaitFor(t, k8sClient, polling, client.ObjectKeyFromObject(tj), &jobsetv1alpha2.JobSet{}, check)
}

// waitForJobSetGone waits for the TrainJob's JobSet to be deleted.
func waitForJobSetGone(t *testing.T, tj *trainer.TrainJob, why string) {
	t.Helper()
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(tj), &jobsetv1alpha2.JobSet{}))
	}, timeout, interval, why)
}

// eventReasons lists the type and reason of each event about an object.
func eventReasons(t *testing.T, obj client.Object) []string {
	t.Helper()
	return utiltesting.EventReasons(t, k8sClient, obj)
}
