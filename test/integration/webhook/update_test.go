package webhook

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
)

func TestUpdates(t *testing.T) {
	nodeSelector := func(tj *trainer.TrainJob) {
		tj.Spec.PodSpecOverrides = []trainer.PodSpecOverride{{NodeSelector: map[string]string{"flavor": "a100"}}}
	}
	cases := map[string]struct {
		suspended bool
		change    func(*trainer.TrainJob)
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
		"a running TrainJob cannot change its image": {
			change:  func(tj *trainer.TrainJob) { tj.Spec.Trainer = &trainer.Trainer{Image: ptr.To("other")} },
			wantErr: "spec: Forbidden: only spec.suspend may change while the TrainJob runs: suspend it first",
		},
		"a running TrainJob cannot get overrides": {
			change:  nodeSelector,
			wantErr: "spec: Forbidden: only spec.suspend may change while the TrainJob runs",
		},
		"a running TrainJob cannot change its labels for the JobSet": {
			change:  func(tj *trainer.TrainJob) { tj.Spec.Labels = map[string]string{"team": "a"} },
			wantErr: "spec: Forbidden: only spec.suspend may change while the TrainJob runs",
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
