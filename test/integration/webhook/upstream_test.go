package webhook

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

// Each runtime patch gets the time it was written, as upstream Kubeflow Trainer's webhook stamps
// it: on create; on update only when that patch is new or changed, so that an update by one
// manager leaves the times of the others' patches as they were, whatever the update sent.
func TestRuntimePatchTimesAreStampedWhenAPatchChanges(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	selector := func(manager, pool string) trainer.RuntimePatch {
		return utiltesting.JobPatch(manager, utiltesting.PodPatch("node", nil, &trainer.PodSpecPatch{NodeSelector: map[string]string{"pool": pool}}))
	}
	written := metav1.NewTime(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	kueue := selector("kueue.x-k8s.io/manager", "a")
	kueue.Time = &written
	tj := utiltesting.MakeTrainJob("times", ns).Suspend(true).RuntimePatches(kueue, selector("team-a", "a")).Obj()
	tj.Spec.RuntimeRef.Name = "torch-distributed"
	before := time.Now().Add(-time.Second)
	require.NoError(t, k8sClient.Create(ctx, tj))

	times := func(tj *trainer.TrainJob) map[string]time.Time {
		got := map[string]time.Time{}
		for _, p := range tj.Spec.RuntimePatches {
			require.NotNil(t, p.Time, "patch of %s has no time", p.Manager)
			got[p.Manager] = p.Time.Time
		}
		return got
	}
	created := times(tj)
	assert.True(t, created["kueue.x-k8s.io/manager"].Equal(written.Time), "a time the manager wrote is kept: %v", created)
	assert.False(t, created["team-a"].Before(before.Truncate(time.Second)), "a patch without a time is stamped on create: %v", created)

	// An update that changes team-a's patch and sends made-up times for both: Kueue's unchanged
	// patch keeps its time; team-a's changed one gets the update's, as upstream's webhook stamps it.
	update := func(change func(*trainer.TrainJob)) map[string]time.Time {
		got := &trainer.TrainJob{}
		require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error { // The operator writes its status.
			require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), got))
			change(got)
			return k8sClient.Update(ctx, got)
		}))
		return times(got)
	}
	later := metav1.NewTime(written.Add(time.Hour))
	got := update(func(tj *trainer.TrainJob) {
		tj.Spec.RuntimePatches[0].Time = &later
		tj.Spec.RuntimePatches[1] = selector("team-a", "b")
		tj.Spec.RuntimePatches[1].Time = &later
	})
	assert.True(t, got["kueue.x-k8s.io/manager"].Equal(written.Time), "an unchanged patch keeps its time: %v", got)
	assert.False(t, got["team-a"].Equal(later.Time), "a changed patch kept the time it was sent: %v", got)
	assert.False(t, got["team-a"].Before(before.Truncate(time.Second)), "a changed patch is stamped: %v", got)

	// A new manager's patch keeps a time it brings, or gets the update's.
	got = update(func(tj *trainer.TrainJob) {
		brought := selector("team-b", "b")
		brought.Time = &later
		tj.Spec.RuntimePatches = append(tj.Spec.RuntimePatches, brought, selector("team-c", "c"))
	})
	assert.True(t, got["kueue.x-k8s.io/manager"].Equal(written.Time), "an unchanged patch keeps its time: %v", got)
	assert.True(t, got["team-b"].Equal(later.Time), "a new patch keeps the time it brings: %v", got)
	assert.False(t, got["team-c"].Before(before.Truncate(time.Second)), "a new patch without a time is stamped: %v", got)
}

// What upstream Kubeflow Trainer and its SDK write is accepted and reaches the JobSet: an empty
// storageUri (the runtime's STORAGE_URI stays), a runtime patch's terminationGracePeriodSeconds,
// a GPU-only resourcesPerNode merged into the runtime's resources.
// Upstream's cap of 128 command items holds here too.
func TestUpstreamFieldsReachTheJobSet(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	dataset := utiltesting.ReplicatedJob("dataset-initializer", trainer.AncestorDatasetInitializer, "dataset-initializer")
	dataset.Template.Spec.Template.Spec.Containers[0].Env = env("STORAGE_URI", "hf://runtime/default")
	node := utiltesting.ReplicatedJob("node", trainer.AncestorTrainer, "node")
	node.Template.Spec.Template.Spec.Containers[0].Resources.Requests = corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi")}
	spec := utiltesting.MakeRuntimeSpec().ReplicatedJobs(dataset, node).Torch(&trainer.TorchMLPolicySource{}).Obj()
	require.NoError(t, k8sClient.Create(ctx, utiltesting.TrainingRuntime("with-dataset", ns, spec)))

	tj := utiltesting.MakeTrainJob("upstream", ns).RuntimeRef(trainer.TrainingRuntimeKind, "with-dataset").
		Initializer(&trainer.Initializer{Dataset: &trainer.DatasetInitializer{StorageUri: ptr.To("")}}).
		Trainer(&trainer.Trainer{ResourcesPerNode: &corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}).
		RuntimePatches(utiltesting.JobPatch("sdk", utiltesting.PodPatch("node", nil, &trainer.PodSpecPatch{TerminationGracePeriodSeconds: ptr.To[int64](300)}))).Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))

	utiltesting.WaitFor(t, k8sClient, utiltesting.Polling{Timeout: timeout, Interval: interval}, client.ObjectKeyFromObject(tj), &jobsetv1alpha2.JobSet{},
		func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
			if !assert.Len(c, js.Spec.ReplicatedJobs, 2) {
				return
			}
			init, node := js.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec, js.Spec.ReplicatedJobs[1].Template.Spec.Template.Spec
			assert.Equal(c, env("STORAGE_URI", "hf://runtime/default"), init.Containers[0].Env, "an empty storageUri leaves the runtime's")
			assert.Equal(c, ptr.To[int64](300), node.TerminationGracePeriodSeconds)
			assert.Equal(c, corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi")},
				Limits:   corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")},
			}, node.Containers[0].Resources, "a GPU-only resourcesPerNode keeps the runtime's CPU and memory")
		})

	long := utiltesting.MakeTrainJob("long", ns).Trainer(&trainer.Trainer{Command: make([]string, 129)}).Obj()
	long.Spec.RuntimeRef.Name = "torch-distributed"
	err := k8sClient.Create(ctx, long)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.trainer.command: Too many: 129: must have at most 128 items")
}

// What upstream Kubeflow Trainer's schema accepts, and this operator once refused, is accepted
// through the real API server and webhooks, with upstream's meaning: an empty mpiImplementation
// (OpenMPI), a coscheduling timeout of 0 (the default), a trainer argument of 1 MiB (its SDK's
// training function). What etcd cannot store is still refused at admission, naming the field.
func TestWhatUpstreamsSchemaAcceptsIsAccepted(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	launcher := utiltesting.ReplicatedJob("launcher", trainer.AncestorTrainer, "node")
	launcher.Template.Spec.Template.Spec.Containers[0].Command = []string{"mpirun", "python", "-c"}
	node := utiltesting.ReplicatedJob("node", "", "node")
	spec := utiltesting.MakeRuntimeSpec().ReplicatedJobs(launcher, node).NumNodes(2).
		MPI(&trainer.MPIMLPolicySource{MPIImplementation: ptr.To[trainer.MPIImplementation]("")}).Obj()
	require.NoError(t, k8sClient.Create(ctx, utiltesting.TrainingRuntime("mpi", ns, spec)))
	stored := &trainer.TrainingRuntime{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "mpi"}, stored))
	assert.Equal(t, ptr.To[trainer.MPIImplementation](""), stored.Spec.MLPolicy.MPI.MPIImplementation, "kept as written, as upstream keeps it")

	source := strings.Repeat("x = 1\n", 1<<20/6) // about 1 MiB of a training function's source
	tj := utiltesting.MakeTrainJob("sdk", ns).RuntimeRef(trainer.TrainingRuntimeKind, "mpi").
		Trainer(&trainer.Trainer{Args: []string{source}}).Obj()
	warned, collected, err := testenv.ClientWithWarnings(restCfg)
	require.NoError(t, err)
	require.NoError(t, warned.Create(ctx, tj))
	assert.Equal(t, []string{"spec.trainer.args[0]: 1023 KiB: Linux starts no process with an argument of 128 KiB or more (MAX_ARG_STRLEN): the container would fail to start; pass it in a file or a volume"},
		collected.Texts(), "accepted, as upstream accepts it, with a warning")
	utiltesting.WaitFor(t, k8sClient, utiltesting.Polling{Timeout: timeout, Interval: interval}, client.ObjectKeyFromObject(tj), &jobsetv1alpha2.JobSet{},
		func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
			c0 := js.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[0]
			assert.Equal(c, []string{source}, c0.Args, "the trainer's args reach the launcher whole")
			assert.Contains(c, c0.Env, corev1.EnvVar{Name: "OMPI_MCA_orte_default_hostfile", Value: "/etc/mpi/hostfile"}, "an empty mpiImplementation is OpenMPI")
		})

	tooLarge := utiltesting.MakeTrainJob("too-large", ns).RuntimeRef(trainer.TrainingRuntimeKind, "mpi").
		Trainer(&trainer.Trainer{Args: []string{source[:720<<10], source[:720<<10]}}).Obj()
	err = k8sClient.Create(ctx, tooLarge)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `spec.trainer.args: Invalid value: "1440 KiB": the JobSet built from it would take`)
	tooLong := utiltesting.MakeTrainJob("too-long", ns).RuntimeRef(trainer.TrainingRuntimeKind, "mpi").
		Trainer(&trainer.Trainer{Args: []string{source + strings.Repeat("y", 1<<20)}}).Obj()
	err = k8sClient.Create(ctx, tooLong)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.trainer.args[0]: Too long: may not be more than 1048576 bytes")

	gang := func(name string, seconds int32) *trainer.TrainingRuntime {
		spec := utiltesting.MakeRuntimeSpec().ReplicatedJobs(utiltesting.ReplicatedJob("node", trainer.AncestorTrainer, "node")).
			PodGroupPolicy(trainer.PodGroupPolicySource{Coscheduling: &trainer.CoschedulingPodGroupPolicySource{ScheduleTimeoutSeconds: ptr.To(seconds)}}).Obj()
		return utiltesting.TrainingRuntime(name, ns, spec)
	}
	require.NoError(t, k8sClient.Create(ctx, gang("default-timeout", 0)), "0 is upstream's default")
	err = k8sClient.Create(ctx, gang("negative-timeout", -1))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.podGroupPolicy.coscheduling.scheduleTimeoutSeconds: Invalid value: -1: spec.podGroupPolicy.coscheduling.scheduleTimeoutSeconds in body should be greater than or equal to 0")
}
