// Package e2e proves the operator in a local cluster where TrainJobs really run: the real JobSet
// controller and its admission webhooks, kube-controller-manager's Job controller and garbage
// collector, the scheduler-plugins scheduler with Coscheduling, and KWOK's fake nodes, whose pods
// run for a moment and succeed (or fail, when a test asks). The operator's manager runs in this
// process, with its webhooks, as cmd/main.go builds it.
//
// The tests run one after another: they share the cluster's nodes, and those that need a given
// amount of free capacity bring nodes of their own (see addNodes).
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/controller"
	utiltesting "github.com/trainjob/operator/internal/testing"
	operatorwebhook "github.com/trainjob/operator/internal/webhook"
	"github.com/trainjob/operator/test/testenv"
)

var (
	k8sClient client.Client
	cluster   *testenv.Cluster
	// realNodeImages are the real node's images beyond its own (see testenv.LocalOptions): the
	// torchrun build tag adds PyTorch's.
	realNodeImages []string
)

// podRunTime is how long a pod runs before it succeeds, unless a test says otherwise: long
// enough to watch pods run, short enough for a quick suite.
const podRunTime = 2 * time.Second

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	logFile, err := os.CreateTemp("", "trainjob-e2e-manager-*.log")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer logFile.Close()
	ctrl.SetLogger(zap.New(zap.WriteTo(logFile), zap.UseDevMode(true)))

	opts := testenv.DefaultLocalOptions()
	opts.PodRunTime = podRunTime
	opts.RealNode = true
	opts.RealNodeImages = realNodeImages
	if cluster, err = testenv.Start(testenv.WithWebhooks, testenv.WithLocalCluster(opts)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cluster.Stop()
	k8sClient = cluster.Client
	// Every capability on, as make run runs it: the manager's webhook gives each TrainJob the
	// history's finalizer, and the history (cmd/history, built here) records every run of the
	// suite in SQLite and releases it.
	cluster.Admission = operatorwebhook.Options{History: true}
	stop, err := cluster.StartManager(controller.Options{MaxConcurrentReconciles: 4})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stop()
	if err := startHistory(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := cluster.Install(context.Background(), "config/runtimes"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	if code == 0 {
		// After the whole suite: no field of what the operator writes has two writers.
		overlaps, err := testenv.FieldOverlaps(context.Background(), k8sClient)
		if err != nil || len(overlaps) > 0 {
			fmt.Fprintf(os.Stderr, "Checking the managed fields: %v\n%s\n", err, strings.Join(overlaps, "\n"))
			code = 1
		}
	}
	if code != 0 {
		// The cluster's logs go with it: keep a copy to read.
		keep, _ := os.MkdirTemp("", "trainjob-e2e-logs-")
		_ = os.CopyFS(keep, os.DirFS(cluster.LogDir()))
		fmt.Fprintf(os.Stderr, "The manager's log: %s\nThe cluster's logs: %s\n", logFile.Name(), keep)
	} else {
		_ = os.Remove(logFile.Name())
	}
	return code
}

// startHistory builds the history program from this tree and runs it beside the cluster, as the
// installed history with its RBAC, recording into a SQLite file in the cluster's folder.
func startHistory() error {
	dir, err := os.MkdirTemp("", "trainjob-history-e2e-")
	if err != nil {
		return err
	}
	binary := filepath.Join(dir, "history")
	if out, err := exec.Command("go", "build", "-o", binary, "../../cmd/history").CombinedOutput(); err != nil {
		return fmt.Errorf("building the history: %v\n%s", err, out)
	}
	return cluster.StartHistory(context.Background(), binary, filepath.Join(cluster.Dir, "history.db"))
}

// Polling limits: a TrainJob of a few pods runs to Complete within seconds here.
const (
	timeout  = 60 * time.Second
	interval = 100 * time.Millisecond
)

func newNamespace(t *testing.T) string { return utiltesting.NewNamespace(t, k8sClient, "e2e") }

// waitForTrainJob waits for the TrainJob to satisfy check, and returns it.
func waitForTrainJob(t *testing.T, tj *trainer.TrainJob, check func(c *assert.CollectT, tj *trainer.TrainJob)) *trainer.TrainJob {
	t.Helper()
	return utiltesting.WaitFor(t, k8sClient, utiltesting.Polling{Timeout: timeout, Interval: interval},
		client.ObjectKeyFromObject(tj), &trainer.TrainJob{}, check)
}

// isTrue checks that the TrainJob's condition is True.
func isTrue(condType string) func(c *assert.CollectT, tj *trainer.TrainJob) {
	return func(c *assert.CollectT, tj *trainer.TrainJob) {
		assert.True(c, apimeta.IsStatusConditionTrue(tj.Status.Conditions, condType), "%s is not True: %v", condType, tj.Status.Conditions)
	}
}

// stateIs checks the TrainJob's status.state, the STATE column.
func stateIs(state string) func(c *assert.CollectT, tj *trainer.TrainJob) {
	return func(c *assert.CollectT, tj *trainer.TrainJob) {
		assert.Equal(c, state, tj.Status.State, "state; conditions %v", tj.Status.Conditions)
	}
}

// waitForComplete waits for the TrainJob to be Complete, with a jobsStatus that matches its
// JobSet's replicated jobs: a JobSet's Jobs may still wind down after its terminal state, and the
// TrainJob's counts follow.
func waitForComplete(t *testing.T, tj *trainer.TrainJob) *trainer.TrainJob {
	t.Helper()
	return waitForTrainJob(t, tj, func(c *assert.CollectT, got *trainer.TrainJob) {
		isTrue(trainer.TrainJobComplete)(c, got)
		js := &jobsetv1alpha2.JobSet{}
		require.NoError(c, k8sClient.Get(context.Background(), client.ObjectKeyFromObject(tj), js))
		var want []trainer.JobStatus
		for _, s := range js.Status.ReplicatedJobsStatus {
			want = append(want, trainer.JobStatus{Name: s.Name, Ready: s.Ready, Succeeded: s.Succeeded,
				Failed: s.Failed, Active: s.Active, Suspended: s.Suspended})
		}
		assert.NotEmpty(c, want, "JobSet %s reports no replicated jobs", tj.Name)
		assert.Equal(c, want, got.Status.JobsStatus, "jobsStatus of %s", tj.Name)
		assert.False(c, apimeta.IsStatusConditionTrue(got.Status.Conditions, trainer.TrainJobFailed))
		if complete := apimeta.FindStatusCondition(got.Status.Conditions, trainer.TrainJobComplete); complete != nil {
			assert.Equal(c, &complete.LastTransitionTime, got.Status.CompletionTime, "status.completionTime is when it completed")
		}
	})
}

// pods lists the pods of a TrainJob's JobSet.
func pods(t require.TestingT, tj *trainer.TrainJob) []corev1.Pod {
	list := &corev1.PodList{}
	require.NoError(t, k8sClient.List(context.Background(), list, client.InNamespace(tj.Namespace),
		client.MatchingLabels{jobsetv1alpha2.JobSetNameKey: tj.Name}))
	return list.Items
}

// bound counts the pods that the scheduler bound to a node.
func bound(pods []corev1.Pod) int {
	n := 0
	for _, p := range pods {
		if p.Spec.NodeName != "" {
			n++
		}
	}
	return n
}
