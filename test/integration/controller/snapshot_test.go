package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/controller"
	"github.com/trainjob/operator/internal/framework"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/internal/trainingruntime"
)

// TestATrainJobIsBuiltFromItsRuntimeAsItWas queues TrainJobs as Kueue does (created suspended),
// then edits their runtime's image and, across a restart of the operator, edits the TrainJobs
// while suspended as Kueue does (a runtime patch), deletes the runtime, and resumes one: each is
// built again with its patch, from the runtime as it was when it was first built, kept in a
// ConfigMap it owns.
func TestATrainJobIsBuiltFromItsRuntimeAsItWas(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	rt := utiltesting.TrainingRuntime("blueprint", ns, utiltesting.MakeRuntimeSpec().NumNodes(2).Obj())
	require.NoError(t, k8sClient.Create(ctx, rt))
	queued := utiltesting.MakeTrainJob("queued", ns).RuntimeRef(trainer.TrainingRuntimeKind, rt.Name).Suspend(true).Obj()
	require.NoError(t, k8sClient.Create(ctx, queued))
	waitForJobSet(t, queued, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
	built := waitForTrainJob(t, queued, func(c *assert.CollectT, tj *trainer.TrainJob) {
		assert.NotNil(c, tj.Status.RuntimeSnapshot, "no snapshot recorded")
	})
	snap := built.Status.RuntimeSnapshot
	cm := &corev1.ConfigMap{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "queued-runtime-snapshot"}, cm))
	assert.Equal(t, "queued-runtime-snapshot", snap.ConfigMap)
	assert.True(t, metav1.IsControlledBy(cm, built), "the snapshot is not the TrainJob's")
	assert.Contains(t, cm.Data["runtime"], "kind: TrainingRuntime")
	assert.Equal(t, ptr.To[int32](2), snap.MLPolicy.NumNodes)

	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(rt), rt))
	rt.Spec.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[0].Image = "busybox:edited"
	require.NoError(t, k8sClient.Update(ctx, rt))
	restartManager(t)

	kueuePatch := utiltesting.JobPatch("kueue.x-k8s.io/manager", utiltesting.PodPatch("node", nil, &trainer.PodSpecPatch{NodeSelector: map[string]string{"flavor": "a100"}}))
	updateTrainJob(t, queued, func(tj *trainer.TrainJob) { tj.Spec.RuntimePatches = []trainer.RuntimePatch{kueuePatch} })
	js := waitForJobSet(t, queued, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
		pod := js.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec
		assert.Equal(c, map[string]string{"flavor": "a100"}, pod.NodeSelector, "Kueue's patch")
	})
	assert.Equal(t, "busybox", js.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[0].Image, "the runtime's edit reached a built TrainJob")

	// Its runtime gone, the TrainJob still changes while suspended, and runs.
	require.NoError(t, k8sClient.Delete(ctx, rt))
	updateTrainJob(t, queued, func(tj *trainer.TrainJob) {
		tj.Spec.Trainer = &trainer.Trainer{NumNodes: ptr.To[int32](3)}
		tj.Spec.Suspend = ptr.To(false)
	})
	js = waitForJobSet(t, queued, func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
		assert.Equal(c, ptr.To(false), js.Spec.Suspend)
		assert.Equal(c, ptr.To[int32](3), js.Spec.ReplicatedJobs[0].Template.Spec.Completions)
	})
	assert.Equal(t, "busybox", js.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[0].Image)
	assert.Equal(t, snap, got(t, queued).Status.RuntimeSnapshot, "the snapshot was taken again")
}

// TestASnapshotChangedBySomeoneElseIsNotBuiltFrom edits a suspended TrainJob's runtime snapshot,
// as a neighbour with rights on ConfigMaps could: the TrainJob is not built from it, and says why.
func TestASnapshotChangedBySomeoneElseIsNotBuiltFrom(t *testing.T) {
	ctx := context.Background()
	ns, runtime := setup(t)
	tj := utiltesting.MakeTrainJob("tampered", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).Suspend(true).Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))
	before := waitForJobSet(t, tj, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})
	waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) { assert.NotNil(c, tj.Status.RuntimeSnapshot) })

	cm := &corev1.ConfigMap{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "tampered-runtime-snapshot"}, cm))
	cm.Data["runtime"] += "\n# a change\n"
	require.NoError(t, k8sClient.Update(ctx, cm))
	updateTrainJob(t, tj, func(tj *trainer.TrainJob) { tj.Spec.Trainer = &trainer.Trainer{NumNodes: ptr.To[int32](3)} })

	got := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		conditionIs(c, tj, trainer.TrainJobCreated, metav1.ConditionFalse, trainer.TrainJobJobsBuildFailedReason)
	})
	assert.Contains(t, got.Status.Conditions[len(got.Status.Conditions)-1].Message, `ConfigMap "tampered-runtime-snapshot"`)
	assert.Contains(t, got.Status.Conditions[len(got.Status.Conditions)-1].Message, "changed or replaced by someone else")
	js := &jobsetv1alpha2.JobSet{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), js))
	assert.Equal(t, before.Generation, js.Generation, "the JobSet was built from a changed snapshot")
}

// TestASnapshotIsRecordedFromTheJobSetWhenItsStatusWriteWasLost: the operator keeps a runtime's
// copy and makes the JobSet from it, which records the copy's digest, then stops before the status
// write that records the copy (one write per TrainJob on the way to its JobSet). The operator
// records the copy the JobSet was made from, read back from its ConfigMap, not the runtime as it
// is now, and rewrites neither. (Here the TrainJob waits for its runtime while the test writes
// what the stopped operator wrote; the runtime, created last, differs from the copy.)
func TestASnapshotIsRecordedFromTheJobSetWhenItsStatusWriteWasLost(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	withManager(t, controller.Options{MaxConcurrentReconciles: 4, RuntimeGracePeriod: time.Hour})
	spec := utiltesting.MakeRuntimeSpec().NumNodes(2).Obj()
	tj := utiltesting.MakeTrainJob("lost", ns).RuntimeRef(trainer.TrainingRuntimeKind, "blueprint").Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))
	copied := &trainingruntime.Runtime{Kind: trainer.TrainingRuntimeKind, Name: "blueprint", Spec: &spec}
	cm, snapshot, err := trainingruntime.Snapshot(tj, copied, map[string]string{trainer.TrainJobNameLabel: tj.Name}, framework.OwnerReference(tj))
	require.NoError(t, err)
	require.NoError(t, k8sClient.Create(ctx, cm))
	js := utiltesting.MakeJobSet(tj, spec).Annotations(map[string]string{trainingruntime.DigestAnnotation: snapshot.Digest}).Obj()
	require.NoError(t, k8sClient.Create(ctx, js))
	spec.MLPolicy.NumNodes = ptr.To[int32](5)
	require.NoError(t, k8sClient.Create(ctx, utiltesting.TrainingRuntime("blueprint", ns, spec)))

	recorded := waitForTrainJob(t, tj, func(c *assert.CollectT, tj *trainer.TrainJob) {
		assert.Equal(c, snapshot, tj.Status.RuntimeSnapshot)
		conditionIs(c, tj, trainer.TrainJobCreated, metav1.ConditionTrue, trainer.TrainJobJobsCreatedReason)
	})
	assert.Equal(t, ptr.To[int32](2), recorded.Status.RuntimeSnapshot.MLPolicy.NumNodes, "the runtime as it is now was recorded")
	after := &jobsetv1alpha2.JobSet{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(js), after))
	assert.Equal(t, js.ResourceVersion, after.ResourceVersion, "the JobSet was rewritten")
	kept := &corev1.ConfigMap{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(cm), kept))
	assert.Equal(t, cm.ResourceVersion, kept.ResourceVersion, "the copy was rewritten")

	// Once recorded, the copy is the status's: someone who may write ConfigMaps and JobSets
	// changes the copy and puts its digest on the JobSet; the record stays.
	kept.Data[trainingruntime.SnapshotKey] = strings.Replace(kept.Data[trainingruntime.SnapshotKey], "numNodes: 2", "numNodes: 7", 1)
	require.NoError(t, k8sClient.Update(ctx, kept))
	sum := sha256.Sum256([]byte(kept.Data[trainingruntime.SnapshotKey]))
	after.Annotations[trainingruntime.DigestAnnotation] = "sha256:" + hex.EncodeToString(sum[:])
	require.NoError(t, k8sClient.Update(ctx, after))
	assertNever(t, func() bool { return !equality.Semantic.DeepEqual(snapshot, got(t, tj).Status.RuntimeSnapshot) },
		"a JobSet's annotation replaced the recorded copy")
}
