package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	"sigs.k8s.io/yaml"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

// Kueue's labels on a TrainJob.
const (
	queueLabel    = trainer.KueueQueueLabel
	priorityLabel = "kueue.x-k8s.io/priority-class"
)

// createKueueObjects creates Kueue's objects from YAML documents, as an administrator applies
// them: Kueue's Go types are not this module's.
func createKueueObjects(t *testing.T, docs string) {
	t.Helper()
	for _, doc := range strings.Split(docs, "\n---\n") {
		obj := &unstructured.Unstructured{}
		require.NoError(t, yaml.Unmarshal([]byte(doc), &obj.Object))
		require.NoError(t, k8sClient.Create(context.Background(), obj), "creating %s %s", obj.GetKind(), obj.GetName())
	}
}

// kueueQueue makes a pool of fake nodes labelled pool=<ns>, a ResourceFlavor with that node label,
// a ClusterQueue that lends cpu of that flavor to namespace ns only (preempting lower priorities),
// and the LocalQueue "queue" in ns. Every name is ns, so that tests do not share quota.
func kueueQueue(t *testing.T, ns string, nodes int, nodeCPU, quotaCPU string) {
	t.Helper()
	for i := range nodes {
		addNode(t, fmt.Sprintf("%s-%d", ns, i), ns, nodeCPU)
	}
	createKueueObjects(t, `apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata:
  name: `+ns+`
spec:
  nodeLabels:
    pool: `+ns+`
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: `+ns+`
spec:
  namespaceSelector:
    matchLabels:
      kubernetes.io/metadata.name: `+ns+`
  preemption:
    withinClusterQueue: LowerPriority
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: `+ns+`
      resources:
      - name: cpu
        nominalQuota: "`+quotaCPU+`"
      - name: memory
        nominalQuota: 1Ti
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata:
  name: queue
  namespace: `+ns+`
spec:
  clusterQueue: `+ns)
}

// kueueRuntime is a TrainingRuntime shaped as upstream writes them (the ancestor label on the Job
// template, which Kueue's pod counting reads) whose trainer pods ask for 1 CPU and run for runFor.
func kueueRuntime(t *testing.T, ns string, runFor time.Duration) {
	t.Helper()
	job := nodeJob("1")
	job.Template.Labels = job.Template.Spec.Template.Labels
	job.Template.Spec.Template.Labels = nil
	job.Template.Spec.Template.Annotations = map[string]string{testenv.RunForAnnotation: runFor.String()}
	createRuntime(t, ns, "queued", utiltesting.MakeRuntimeSpec().ReplicatedJobs(job).Obj())
}

// queuedTrainJob creates a TrainJob of the "queued" runtime of ns in its LocalQueue.
func queuedTrainJob(t *testing.T, ns, name string, nodes int32, labels map[string]string) *trainer.TrainJob {
	t.Helper()
	return createTrainJob(t, ns, name, "queued", func(w *utiltesting.TrainJobWrapper) {
		w.NumNodes(nodes)
		w.Labels = map[string]string{queueLabel: "queue"}
		for k, v := range labels {
			w.Labels[k] = v
		}
	})
}

// workloadPodCounts reads the pod counts of the Workload Kueue made for a TrainJob, by pod set.
func workloadPodCounts(c require.TestingT, tj *trainer.TrainJob) map[string]int64 {
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("kueue.x-k8s.io/v1beta2")
	list.SetKind("WorkloadList")
	require.NoError(c, k8sClient.List(context.Background(), list, client.InNamespace(tj.Namespace)))
	counts := map[string]int64{}
	for _, wl := range list.Items {
		if !metav1.IsControlledBy(&wl, tj) {
			continue
		}
		podSets, _, _ := unstructured.NestedSlice(wl.Object, "spec", "podSets")
		for _, ps := range podSets {
			m := ps.(map[string]any)
			counts[m["name"].(string)] = m["count"].(int64)
		}
	}
	return counts
}

// current reads the TrainJob as it is now.
func current(c require.TestingT, tj *trainer.TrainJob) *trainer.TrainJob {
	got := &trainer.TrainJob{}
	require.NoError(c, k8sClient.Get(context.Background(), client.ObjectKeyFromObject(tj), got))
	return got
}

func suspended(c require.TestingT, tj *trainer.TrainJob) bool {
	return ptr.Deref(current(c, tj).Spec.Suspend, false)
}

// TestKueueAdmitsOntoItsFlavor queues a TrainJob of the shipped torch runtime: Kueue suspends it
// at creation, counts its pods with upstream's code on our runtime, admits it, and writes its
// flavor's node selector through runtimePatches; the pods land on the flavor's nodes and the
// TrainJob completes.
func TestKueueAdmitsOntoItsFlavor(t *testing.T) {
	ns := newNamespace(t)
	kueueQueue(t, ns, 2, "4", "8")
	tj := utiltesting.MakeTrainJob("flavored", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch-distributed").
		NumNodes(3).NumProcPerNode(intstr.FromInt32(1)).Obj()
	tj.Labels = map[string]string{queueLabel: "queue"}
	require.NoError(t, k8sClient.Create(context.Background(), tj))
	assert.True(t, ptr.Deref(tj.Spec.Suspend, false), "Kueue's webhook did not suspend the TrainJob at creation")

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, map[string]int64{"node": 3}, workloadPodCounts(c, tj))
	}, timeout, interval, "Kueue counts the trainer's numNodes pods")
	got := waitForComplete(t, tj)
	patch := got.Spec.RuntimePatches
	require.Len(t, patch, 1)
	assert.Equal(t, "kueue.x-k8s.io/manager", patch[0].Manager)

	ps := pods(t, tj)
	require.Len(t, ps, 3)
	for _, p := range ps {
		assert.Equal(t, ns, p.Spec.NodeSelector["pool"], "pod %s has not the flavor's node selector", p.Name)
		assert.True(t, strings.HasPrefix(p.Spec.NodeName, ns+"-"), "pod %s ran on %s, not on the flavor's nodes", p.Name, p.Spec.NodeName)
		assert.Equal(t, "queue", p.Labels["kueue.x-k8s.io/local-queue-name"])
	}
}

// TestKueueQueuesOverQuota queues two TrainJobs that together need more CPU than the quota: the
// second stays suspended, with no pods, until the first finishes, then runs.
func TestKueueQueuesOverQuota(t *testing.T) {
	ns := newNamespace(t)
	kueueQueue(t, ns, 1, "4", "2")
	kueueRuntime(t, ns, 6*time.Second)
	first := queuedTrainJob(t, ns, "first", 2, nil)
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.False(c, suspended(c, first)) }, timeout, interval)
	second := queuedTrainJob(t, ns, "second", 2, nil)

	for start := time.Now(); !apimeta.IsStatusConditionTrue(current(t, first).Status.Conditions, trainer.TrainJobComplete); time.Sleep(interval) {
		require.True(t, suspended(t, second), "the second TrainJob ran while the first held the quota")
		require.Empty(t, pods(t, second))
		require.Less(t, time.Since(start), timeout, "the first TrainJob did not complete")
	}
	done := apimeta.FindStatusCondition(waitForComplete(t, first).Status.Conditions, trainer.TrainJobComplete)
	got := waitForComplete(t, second)
	require.NotNil(t, got.Status.StartTime, "the resumed TrainJob has no start time")
	assert.False(t, got.Status.StartTime.Before(&done.LastTransitionTime), "the second TrainJob resumed before the first completed")
}

// TestKueuePreemptsForHigherPriority runs a low-priority TrainJob that fills the quota, then
// queues a high-priority one: Kueue suspends the first, whose pods go away, runs the second, and
// then runs the first again to Complete.
func TestKueuePreemptsForHigherPriority(t *testing.T) {
	ns := newNamespace(t)
	kueueQueue(t, ns, 1, "4", "2")
	kueueRuntime(t, ns, 8*time.Second)
	createKueueObjects(t, `apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata:
  name: `+ns+`-low
value: 100
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata:
  name: `+ns+`-high
value: 1000`)

	low := queuedTrainJob(t, ns, "low", 2, map[string]string{priorityLabel: ns + "-low"})
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Equal(c, 2, bound(pods(c, low))) }, timeout, interval)
	firstRun := names(pods(t, low))
	high := queuedTrainJob(t, ns, "high", 2, map[string]string{priorityLabel: ns + "-high"})

	waitForTrainJob(t, low, isTrue(trainer.TrainJobSuspended))
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.Empty(c, pods(c, low)) }, timeout, interval,
		"the preempted TrainJob's pods are stopped")
	highDone := apimeta.FindStatusCondition(waitForComplete(t, high).Status.Conditions, trainer.TrainJobComplete)

	got := waitForComplete(t, low)
	assert.NotSubset(t, firstRun, names(pods(t, low)), "the preempted TrainJob ran again with new pods")
	require.NotNil(t, got.Status.StartTime, "the resumed TrainJob has no start time")
	assert.False(t, got.Status.StartTime.Before(&highDone.LastTransitionTime), "the preempted TrainJob resumed before the preemptor finished")
}

// TestMultiKueueTrainJobIsLeftAlone queues a TrainJob that MultiKueue manages: Kueue admits it,
// and the operator writes nothing for it, neither a JobSet nor a status.
func TestMultiKueueTrainJobIsLeftAlone(t *testing.T) {
	ns := newNamespace(t)
	kueueQueue(t, ns, 0, "4", "8")
	kueueRuntime(t, ns, time.Second)
	tj := createTrainJob(t, ns, "elsewhere", "queued", func(w *utiltesting.TrainJobWrapper) {
		w.Labels = map[string]string{queueLabel: "queue"}
		w.ManagedBy(trainer.MultiKueueControllerName)
	})
	time.Sleep(5 * time.Second)
	got := &trainer.TrainJob{}
	require.NoError(t, k8sClient.Get(context.Background(), client.ObjectKeyFromObject(tj), got))
	assert.Empty(t, got.Status.Conditions, "the operator wrote the status of a TrainJob MultiKueue manages")
	err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(tj), &jobsetv1alpha2.JobSet{})
	assert.True(t, client.IgnoreNotFound(err) == nil && err != nil, "the operator made a JobSet for a TrainJob MultiKueue manages: %v", err)
}

// TestKueueDropsFieldsUpstreamLacks shows what the operator warns about at admission: Kueue
// updates a TrainJob with upstream Kubeflow Trainer's Go types, and so drops spec.labels and
// spec.podSpecOverrides, which those types lack. spec.runtimePatches, which they have, survive.
func TestKueueDropsFieldsUpstreamLacks(t *testing.T) {
	ns := newNamespace(t)
	kueueQueue(t, ns, 1, "4", "4")
	kueueRuntime(t, ns, time.Second)
	c, warnings, err := testenv.ClientWithWarnings(cluster.Env.Config)
	require.NoError(t, err)

	mine := trainer.RuntimePatch{Manager: "team-a", TrainingRuntimeSpec: &trainer.TrainingRuntimeSpecPatch{
		Template: &trainer.JobSetTemplatePatch{Metadata: &trainer.MetadataPatch{Labels: map[string]string{"team": "a"}}},
	}}
	tj := utiltesting.MakeTrainJob("dropped", ns).RuntimeRef(trainer.TrainingRuntimeKind, "queued").
		PodSpecOverrides(trainer.PodSpecOverride{PodSpecPatch: trainer.PodSpecPatch{ServiceAccountName: ptr.To("default")}}).
		RuntimePatches(mine).Obj()
	tj.Labels = map[string]string{queueLabel: "queue"}
	tj.Spec.Labels = map[string]string{"team": "a"}
	require.NoError(t, c.Create(context.Background(), tj))
	assert.Contains(t, warnings.Texts(), "spec.podSpecOverrides: Kueue drops this field when it updates the TrainJob (upstream Kubeflow Trainer has no such field): use spec.runtimePatches")
	assert.Contains(t, warnings.Texts(), "spec.labels: Kueue drops this field when it updates the TrainJob (upstream Kubeflow Trainer has no such field): use spec.runtimePatches")

	got := waitForComplete(t, tj)
	assert.Empty(t, got.Spec.PodSpecOverrides, "Kueue kept spec.podSpecOverrides: the warning is out of date")
	assert.Empty(t, got.Spec.Labels, "Kueue kept spec.labels: the warning is out of date")
	require.Len(t, got.Spec.RuntimePatches, 2)
	kept := got.Spec.RuntimePatches[0]
	assert.NotNil(t, kept.Time, "the webhook stamps each patch's time")
	kept.Time = nil
	assert.Equal(t, mine, kept)
	js := &jobsetv1alpha2.JobSet{}
	require.NoError(t, k8sClient.Get(context.Background(), client.ObjectKeyFromObject(tj), js))
	assert.Equal(t, "a", js.Labels["team"], "the user's runtime patch reached the JobSet")
}

// TestKueueCountsTheShippedRuntimes queues a TrainJob of each shipped runtime: the pod counts
// Kueue computes with upstream's code on our runtimes are the pods of the JobSets they run.
func TestKueueCountsTheShippedRuntimes(t *testing.T) {
	ns := newNamespace(t)
	kueueQueue(t, ns, 4, "16", "64")
	for _, runtime := range []string{"torch-distributed", "mpi-distributed", "xgboost-distributed", "jax-distributed"} {
		t.Run(runtime, func(t *testing.T) {
			tj := utiltesting.MakeTrainJob(strings.TrimSuffix(runtime, "-distributed"), ns).
				RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).NumNodes(3).Obj()
			tj.Labels = map[string]string{queueLabel: "queue"}
			require.NoError(t, k8sClient.Create(context.Background(), tj))
			waitForComplete(t, tj)
			js := &jobsetv1alpha2.JobSet{}
			require.NoError(t, k8sClient.Get(context.Background(), client.ObjectKeyFromObject(tj), js))
			want := map[string]int64{}
			for _, job := range js.Spec.ReplicatedJobs {
				want[job.Name] = int64(job.Replicas) * int64(ptr.Deref(job.Template.Spec.Parallelism, 1))
			}
			assert.Equal(t, want, workloadPodCounts(t, tj))
		})
	}
}
