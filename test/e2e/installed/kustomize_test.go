package installed

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

// TestTheKustomizeInstallRuns installs config/default as docs/install.md tells a platform
// engineer to, with two replicas on the real node, the previous release first, then this one in
// its place with `kubectl apply` while TrainJobs run (upgradeInPlace). Then, through that install
// alone: the shipped
// runtimes and every sample are admitted by its webhooks and run to Complete; bad input is
// refused by its webhooks; a real trainer on the real node reports progress to it by its
// Service's name; a failing trainer's exit code and log reach the TrainJob's status; an elastic
// TrainJob scales; its metrics are scraped with a token; the kubectl plugin works against it;
// and when its leader is killed, the other replica leads within the lease time and rebuilds
// nothing.
func TestTheKustomizeInstallRuns(t *testing.T) {
	ctx := context.Background()
	in := install(t, testenv.InstallKustomize, "", previousRelease)
	waitForOperator(t, in, previousRelease)
	samples := newNamespace(t)
	// What follows tests this release: a failed upgrade stops the test.
	require.True(t, t.Run("kubectl apply upgrades it in place", func(t *testing.T) {
		running := upgradeInPlace(t, in, samples)
		t.Run("its certificate rotates while TrainJobs are admitted", func(t *testing.T) { certificateRotates(t, in, samples, "long") })
		for _, tj := range running {
			require.NoError(t, k8sClient.Delete(ctx, tj))
		}
	}))
	installRuntimes(t)

	t.Run("each manager keeps its heap under its container's memory limit", func(t *testing.T) {
		for _, p := range managerPods(t, in.Namespace) {
			data, err := clientset(t).CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
			require.NoError(t, err)
			assert.Contains(t, string(data), `"softLimitBytes":966367638`, "pod %s: nine tenths of its limit of 1Gi", p.Name)
		}
	})

	t.Run("the samples run to Complete", func(t *testing.T) {
		for _, tj := range applySamples(t, samples) {
			if tj.Spec.RuntimeRef.Name == "torch-kai" {
				continue // No KAI Scheduler in the local cluster.
			}
			waitForTrainJob(t, tj, isTrue(trainer.TrainJobComplete))
		}
	})

	t.Run("bad input is refused by its webhooks", func(t *testing.T) { badInputIsRefused(t, samples) })

	t.Run("a real trainer reports progress at its Service", func(t *testing.T) {
		tj := testenv.RealNodeTrainJob(utiltesting.MakeTrainJob("python", samples).RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch-distributed"), 1)
		tj.Spec.Trainer.Image = ptr.To(testenv.MPIImage)
		tj.Spec.Trainer.Command = []string{"python3", "-c", testenv.ProgressReportScript}
		require.NoError(t, k8sClient.Create(ctx, tj))
		explainOnFailure(t, tj)
		got := waitForTrainJob(t, tj, isTrue(trainer.TrainJobComplete))
		logs := logsOf(t, tj)
		require.NotEmpty(t, logs, "no trainer's log")
		for _, log := range logs {
			assert.Contains(t, log, "reported: 200")
		}
		got = waitForTrainJob(t, got, func(c *assert.CollectT, got *trainer.TrainJob) {
			if assert.NotNil(c, got.Status.TrainerStatus) {
				assert.Equal(c, ptr.To[int32](100), got.Status.TrainerStatus.ProgressPercentage)
			}
		})
		trainers := pods(t, tj)
		require.NotEmpty(t, trainers)
		for _, p := range trainers {
			assert.Contains(t, envOf(p, "KUBEFLOW_TRAINER_SERVER_URL"), "https://"+webhookServiceName+"."+testenv.OperatorNamespace+".svc/",
				"the trainer reports to the install's Service by name")
		}
	})

	t.Run("a failing trainer's cause reaches the status", func(t *testing.T) {
		// A runtime whose trainer fails at once rather than being restarted in its pod.
		rt := &trainer.TrainingRuntime{}
		rt.Name, rt.Namespace = "fail-fast", samples
		rt.Spec = utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{}).Obj()
		job := &rt.Spec.Template.Spec.ReplicatedJobs[0].Template.Spec
		job.BackoffLimit, job.Template.Spec.RestartPolicy = ptr.To[int32](0), corev1.RestartPolicyNever
		require.NoError(t, k8sClient.Create(ctx, rt))
		tj := testenv.RealNodeTrainJob(utiltesting.MakeTrainJob("failing", samples).RuntimeRef(trainer.TrainingRuntimeKind, rt.Name), 1)
		tj.Spec.Trainer.Command = []string{"sh", "-c", "echo 'CUDA error: out of patience' >&2; exit 3"}
		require.NoError(t, k8sClient.Create(ctx, tj))
		explainOnFailure(t, tj)
		got := waitForTrainJob(t, tj, isTrue(trainer.TrainJobFailed))
		require.NotNil(t, got.Status.Failure)
		assert.Equal(t, ptr.To[int32](3), got.Status.Failure.ExitCode)
		assert.Equal(t, testenv.RealNodeName, got.Status.Failure.Node)
		assert.Contains(t, got.Status.Failure.Message, "out of patience")
	})

	t.Run("an elastic TrainJob scales", func(t *testing.T) {
		tj := utiltesting.MakeTrainJob("grow", samples).RuntimeRef(trainer.TrainingRuntimeKind, "torch-elastic").NumNodes(1).Obj()
		tj.Spec.Annotations = map[string]string{testenv.RunForAnnotation: "1h"}
		require.NoError(t, k8sClient.Create(ctx, tj))
		waitForTrainJob(t, tj, func(c *assert.CollectT, got *trainer.TrainJob) { assert.Equal(c, "1/1", got.Status.Ready) })
		out, err := kubectl(t, "scale", "trainjob/grow", "-n", samples, "--replicas", "3")
		require.NoError(t, err, out)
		waitForTrainJob(t, tj, func(c *assert.CollectT, got *trainer.TrainJob) {
			assert.Equal(c, int32(3), got.Status.Nodes)
			assert.Equal(c, "3/3", got.Status.Ready)
		})
		out, err = kubectl(t, "scale", "trainjob/grow", "-n", samples, "--replicas", "4")
		require.Error(t, err)
		assert.Contains(t, out, "spec.trainer.numNodes: Invalid value: 4")
		require.NoError(t, k8sClient.Delete(ctx, tj))
	})

	t.Run("its metrics are scraped with a token", func(t *testing.T) { metricsAreScrapedWithAToken(t) })

	t.Run("the kubectl plugin works against it", func(t *testing.T) {
		out := trainjobCLI(t, samples, "list")
		assert.Regexp(t, `(?m)^torch-example\s+Complete\s`, out)
		out = trainjobCLI(t, samples, "describe", "failing")
		assert.Contains(t, out, "exit code 3")
		assert.Contains(t, out, "out of patience")
	})

	t.Run("the leader is killed: the other replica leads, nothing is built twice", func(t *testing.T) {
		tj := utiltesting.MakeTrainJob("long", samples).RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch-distributed").NumNodes(2).Obj()
		tj.Spec.Annotations = map[string]string{testenv.RunForAnnotation: "1h"}
		require.NoError(t, k8sClient.Create(ctx, tj))
		waitForTrainJob(t, tj, func(c *assert.CollectT, got *trainer.TrainJob) { assert.Equal(c, "2/2", got.Status.Ready) })
		before := untouchedOf(t, tj)

		// No pod the Deployment makes in place of the killed one may start: only the replica that
		// stands by can lead (the real node is the only node that runs containers).
		cordon(t, testenv.RealNodeName, true)
		leader := leaderOf(t, testenv.OperatorNamespace)
		var standby []string
		for _, p := range managerPods(t, testenv.OperatorNamespace) {
			if p.Name != leader {
				standby = append(standby, p.Name)
			}
		}
		killed := killManager(t, leader)
		var next string
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			next = leaderOf(c, testenv.OperatorNamespace)
			assert.NotEqual(c, leader, next)
		}, time.Minute, 100*time.Millisecond)
		took := time.Since(killed)
		assert.Contains(t, standby, next, "the new leader is not the replica that stood by")
		t.Logf("%s led %s after %s was killed", next, took.Round(100*time.Millisecond), leader)
		// The lease lasts 15 s from the last renewal the standby saw, which came up to one retry
		// period before the leader's death; the standby tries again every retry period, 2 s with
		// client-go's jitter of up to 1.2 times more (2 to 4.4 s).
		assert.Less(t, took, 15*time.Second+2*4400*time.Millisecond+2*time.Second, "the other replica took longer than the lease time to lead")

		// The new leader works: a new TrainJob runs, and the running one is as it was.
		next2 := utiltesting.MakeTrainJob("after", samples).RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch-distributed").Obj()
		require.NoError(t, k8sClient.Create(ctx, next2))
		waitForTrainJob(t, next2, isTrue(trainer.TrainJobComplete))
		assert.Equal(t, before, untouchedOf(t, tj), "the JobSet was made or written again, or its pods replaced")
		require.NoError(t, k8sClient.Delete(ctx, tj))
		cordon(t, testenv.RealNodeName, false)
		waitForOperator(t, in, thisRelease)
	})

	t.Run("kubectl delete takes the TrainJobs and their pods with the CRDs", func(t *testing.T) {
		running := startLongTrainJobs(t, newNamespace(t))
		require.NoError(t, in.Uninstall(ctx))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			for _, tj := range running {
				list := &corev1.PodList{}
				require.NoError(c, k8sClient.List(ctx, list, client.InNamespace(tj.Namespace)))
				assert.Empty(c, list.Items, "pods of TrainJob %s", tj.Name)
			}
		}, polling.Timeout, polling.Interval)
	})
}

// installRuntimes installs the shipped runtimes once the operator serves, as docs/install.md
// says: they go through the installed webhooks, which the API server reaches at their Service.
func installRuntimes(t *testing.T) {
	t.Helper()
	require.NoError(t, cluster.InstallWhenServed(context.Background(), "config/runtimes"))
	t.Cleanup(func() { // kubectl delete -k config/runtimes
		objs, err := testenv.Kustomize(filepath.Join(repoRoot(t), "config", "runtimes"))
		require.NoError(t, err)
		for _, obj := range objs {
			if err := k8sClient.Delete(context.Background(), obj); !apierrors.IsNotFound(err) && !apimeta.IsNoMatchError(err) {
				assert.NoError(t, err) // The test may have deleted the CRDs already.
			}
		}
	})
}

// badInputIsRefused creates what the CRD schema accepts but the operator's webhooks refuse: each
// is refused at admission, naming the field and the reason in the webhook's words. (Had the API
// server not reached the installed webhooks, it would refuse them all the same, for that.)
func badInputIsRefused(t *testing.T, ns string) {
	ctx := context.Background()
	tj := utiltesting.MakeTrainJob("bad", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch-distributed").
		Initializer(&trainer.Initializer{Dataset: &trainer.DatasetInitializer{StorageUri: ptr.To("datasets/mnist")}}).Obj()
	err := k8sClient.Create(ctx, tj)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `spec.initializer.dataset.storageUri: Invalid value: "datasets/mnist": storageUri must be empty, an absolute path, or have the form scheme://path`)

	rt := &trainer.TrainingRuntime{}
	rt.Name, rt.Namespace = "bad", ns
	rt.Spec = utiltesting.MakeRuntimeSpec().ReplicatedJobs(utiltesting.ReplicatedJob("node", "", "node")).Obj()
	err = k8sClient.Create(ctx, rt)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.template.spec.replicatedJobs: Required value: the Job template or pod template of one replicated job must be labelled trainer.kubeflow.org/trainjob-ancestor-step=trainer")
}

// envOf is the value of a pod's first container's environment variable.
func envOf(p corev1.Pod, name string) string {
	for _, e := range p.Spec.Containers[0].Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// applySamples applies config/samples as a user does, into namespace ns, and returns the
// TrainJobs among them.
func applySamples(t *testing.T, ns string) []*trainer.TrainJob {
	t.Helper()
	tjs, err := testenv.ApplySamples(context.Background(), k8sClient, ns)
	require.NoError(t, err)
	return tjs
}
