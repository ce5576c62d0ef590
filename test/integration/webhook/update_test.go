package webhook

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
)

func TestUpdates(t *testing.T) {
	nodeSelector := func(tj *trainer.TrainJob) {
		tj.Spec.PodSpecOverrides = []trainer.PodSpecOverride{{PodSpecPatch: trainer.PodSpecPatch{NodeSelector: map[string]string{"flavor": "a100"}}}}
	}
	cases := map[string]struct {
		suspended bool
		// running is the progress deadline the TrainJob is created with.
		running *int32
		change  func(*trainer.TrainJob)
		// wantErr is empty when the update is allowed.
		wantErr string
	}{
		"a running TrainJob can be suspended": {
			change: func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(true) },
		},
		"a running TrainJob can be suspended and given overrides at once, as Kueue preempts": {
			change: func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(true); nodeSelector(tj) },
		},
		"a running TrainJob's metadata can change": {
			change: func(tj *trainer.TrainJob) { tj.Labels = map[string]string{"team": "a"} },
		},
		"a running TrainJob can change its TTL, as a Job can": {
			change: func(tj *trainer.TrainJob) { tj.Spec.TTLSecondsAfterFinished = ptr.To[int32](60) },
		},
		"a TTL cannot be negative": {
			change:  func(tj *trainer.TrainJob) { tj.Spec.TTLSecondsAfterFinished = ptr.To[int32](-1) },
			wantErr: "spec.ttlSecondsAfterFinished: Invalid value: -1: spec.ttlSecondsAfterFinished in body should be greater than or equal to 0",
		},
		"a running TrainJob can be given a progress deadline": {
			change: func(tj *trainer.TrainJob) { tj.Spec.ProgressDeadlineSeconds = ptr.To[int32](600) },
		},
		"a running TrainJob can lose its progress deadline": {
			running: ptr.To[int32](600),
			change:  func(tj *trainer.TrainJob) { tj.Spec.ProgressDeadlineSeconds = nil },
		},
		"a running TrainJob can change its progress deadline with its TTL": {
			running: ptr.To[int32](600),
			change: func(tj *trainer.TrainJob) {
				tj.Spec.ProgressDeadlineSeconds, tj.Spec.TTLSecondsAfterFinished = ptr.To[int32](1200), ptr.To[int32](60)
			},
		},
		"a progress deadline must be at least a second": {
			change:  func(tj *trainer.TrainJob) { tj.Spec.ProgressDeadlineSeconds = ptr.To[int32](0) },
			wantErr: "spec.progressDeadlineSeconds: Invalid value: 0: spec.progressDeadlineSeconds in body should be greater than or equal to 1",
		},
		"a running TrainJob cannot change its image, even with its progress deadline": {
			change: func(tj *trainer.TrainJob) {
				tj.Spec.ProgressDeadlineSeconds, tj.Spec.Trainer = ptr.To[int32](60), &trainer.Trainer{Image: ptr.To("other")}
			},
			wantErr: "spec: Forbidden: only spec.suspend, spec.ttlSecondsAfterFinished, spec.progressDeadlineSeconds and, when its runtime is elastic, spec.trainer.numNodes may change while the TrainJob runs",
		},
		"a running TrainJob cannot change its image": {
			change:  func(tj *trainer.TrainJob) { tj.Spec.Trainer = &trainer.Trainer{Image: ptr.To("other")} },
			wantErr: "spec: Forbidden: only spec.suspend, spec.ttlSecondsAfterFinished, spec.progressDeadlineSeconds and, when its runtime is elastic, spec.trainer.numNodes may change while the TrainJob runs: suspend it first",
		},
		"a running TrainJob cannot get overrides": {
			change:  nodeSelector,
			wantErr: "spec: Forbidden: only spec.suspend, spec.ttlSecondsAfterFinished, spec.progressDeadlineSeconds and, when its runtime is elastic, spec.trainer.numNodes may change while the TrainJob runs",
		},
		"a running TrainJob cannot change its labels for the JobSet": {
			change:  func(tj *trainer.TrainJob) { tj.Spec.Labels = map[string]string{"team": "a"} },
			wantErr: "spec: Forbidden: only spec.suspend, spec.ttlSecondsAfterFinished, spec.progressDeadlineSeconds and, when its runtime is elastic, spec.trainer.numNodes may change while the TrainJob runs",
		},
		"a suspended TrainJob can get the overrides Kueue adds": {
			suspended: true,
			change:    nodeSelector,
		},
		"a suspended TrainJob can change its size": {
			suspended: true,
			change:    func(tj *trainer.TrainJob) { tj.Spec.Trainer = &trainer.Trainer{NumNodes: ptr.To[int32](8)} },
		},
		"a suspended TrainJob can be resumed with new overrides": {
			suspended: true,
			change:    func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(false); nodeSelector(tj) },
		},
		"a suspended TrainJob still cannot override a job its runtime lacks": {
			suspended: true,
			change: func(tj *trainer.TrainJob) {
				tj.Spec.PodSpecOverrides = []trainer.PodSpecOverride{{TargetJobs: []string{"launcher"}}}
			},
			wantErr: `spec.podSpecOverrides[0].targetJobs[0]: Invalid value: "launcher"`,
		},
		"a suspended TrainJob still cannot set torchrun's env": {
			suspended: true,
			change:    func(tj *trainer.TrainJob) { tj.Spec.Trainer = &trainer.Trainer{Env: env("PET_NODE_RANK", "0")} },
			wantErr:   "spec.trainer.env[0].name: Forbidden: PET_NODE_RANK is set by the torch framework",
		},
		"nobody can change the runtime": {
			suspended: true,
			change:    func(tj *trainer.TrainJob) { tj.Spec.RuntimeRef.Name = "jax-distributed" },
			wantErr:   "runtimeRef is immutable",
		},
	}
	ctx := context.Background()
	ns := newNamespace(t)
	i := 0
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			i++
			tj := utiltesting.MakeTrainJob("update-"+string(rune('a'+i)), ns).Suspend(tc.suspended).Obj()
			tj.Spec.ProgressDeadlineSeconds = tc.running
			tj.Spec.RuntimeRef.Name = "torch-distributed"
			require.NoError(t, k8sClient.Create(ctx, tj))

			var err error
			require.Eventually(t, func() bool { // Retry only conflicts with the operator's status writes.
				got := &trainer.TrainJob{}
				require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), got))
				tc.change(got)
				err = k8sClient.Update(ctx, got)
				return err == nil || !isConflict(err)
			}, timeout, interval)
			if tc.wantErr == "" {
				assert.NoError(t, err)
			} else {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
			}
		})
	}
}

// Suspending is never refused for what the TrainJob's runtime became: Kueue must be able to
// preempt a TrainJob whose override names a container its runtime has since lost. Its later edits
// are checked against its runtime snapshot.
func TestSuspendingIsNeverRefusedForTheBuild(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	node := utiltesting.ReplicatedJob("node", trainer.AncestorTrainer, "node")
	node.Template.Spec.Template.Spec.Containers = append(node.Template.Spec.Template.Spec.Containers, corev1.Container{Name: "proxy", Image: "proxy"})
	rt := utiltesting.TrainingRuntime("sidecar", ns, utiltesting.MakeRuntimeSpec().ReplicatedJobs(node).Obj())
	require.NoError(t, k8sClient.Create(ctx, rt))
	tj := utiltesting.MakeTrainJob("uses-proxy", ns).RuntimeRef(trainer.TrainingRuntimeKind, rt.Name).
		PodSpecOverrides(trainer.PodSpecOverride{PodSpecPatch: trainer.PodSpecPatch{Containers: []trainer.ContainerPatch{{Name: "proxy", Env: env("MODE", "fast")}}}}).Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))
	utiltesting.WaitFor(t, k8sClient, utiltesting.Polling{Timeout: timeout, Interval: interval}, client.ObjectKeyFromObject(tj), &trainer.TrainJob{},
		func(c *assert.CollectT, tj *trainer.TrainJob) { assert.NotNil(c, tj.Status.RuntimeSnapshot, "built") })

	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(rt), rt))
	rt.Spec.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers = rt.Spec.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[:1]
	require.NoError(t, k8sClient.Update(ctx, rt))

	update := func(change func(*trainer.TrainJob)) error {
		var err error
		require.Eventually(t, func() bool {
			got := &trainer.TrainJob{}
			require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), got))
			change(got)
			err = k8sClient.Update(ctx, got)
			return err == nil || !isConflict(err)
		}, timeout, interval)
		return err
	}
	assert.NoError(t, update(func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(true) }), "suspending was refused")
	assert.NoError(t, update(func(tj *trainer.TrainJob) { tj.Labels = map[string]string{"preempted": "yes"} }), "a metadata change was refused")
	// A change that needs a new build is checked against the runtime as the TrainJob was first
	// built from it (its snapshot), which still has the proxy.
	assert.NoError(t, update(func(tj *trainer.TrainJob) { tj.Spec.Trainer = &trainer.Trainer{NumNodes: ptr.To[int32](2)} }),
		"checked against the runtime as it is now, not as the TrainJob was built from it")
	err := update(func(tj *trainer.TrainJob) {
		tj.Spec.PodSpecOverrides = append(tj.Spec.PodSpecOverrides, trainer.PodSpecOverride{PodSpecPatch: trainer.PodSpecPatch{Containers: []trainer.ContainerPatch{{Name: "other"}}}})
	})
	assert.ErrorContains(t, err, `spec.podSpecOverrides[1].containers[0].name: Invalid value: "other"`, "a change that needs a new build is still checked")
}
