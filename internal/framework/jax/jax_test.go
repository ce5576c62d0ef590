package jax

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/pipeline"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/internal/trainingruntime"
)

func TestJAX(t *testing.T) {
	cases := map[string]struct {
		runtime  trainer.TrainingRuntimeSpec
		trainJob *trainer.TrainJob
		job      string
		nodes    int32
		wantEnv  []corev1.EnvVar
		wantErr  string
	}{
		"the runtime's nodes are the processes, the first node coordinates": {
			runtime:  utiltesting.MakeRuntimeSpec().NumNodes(4).JAX().Obj(),
			trainJob: utiltesting.MakeTrainJob("llm", "ns").Obj(),
			job:      "node", nodes: 4,
			wantEnv: []corev1.EnvVar{
				{Name: EnvCoordinatorAddress, Value: "llm-node-0-0.llm:29500"},
				{Name: EnvNumProcesses, Value: "4"},
			},
		},
		"the TrainJob's numNodes wins, and the address uses the trainer job's name": {
			runtime: utiltesting.MakeRuntimeSpec().NumNodes(4).JAX().
				ReplicatedJobs(utiltesting.ReplicatedJob("worker", trainer.AncestorTrainer, "node")).Obj(),
			trainJob: utiltesting.MakeTrainJob("llm", "ns").NumNodes(2).Obj(),
			job:      "worker", nodes: 2,
			wantEnv: []corev1.EnvVar{
				{Name: EnvCoordinatorAddress, Value: "llm-worker-0-0.llm:29500"},
				{Name: EnvNumProcesses, Value: "2"},
			},
		},
		"a TrainJob that sets JAX_PROCESS_ID by hand cannot be built": {
			runtime:  utiltesting.MakeRuntimeSpec().JAX().Obj(),
			trainJob: utiltesting.MakeTrainJob("llm", "ns").Trainer(&trainer.Trainer{Env: []corev1.EnvVar{{Name: EnvProcessID, Value: "0"}}}).Obj(),
			wantErr:  "spec.trainer.env[0].name: Forbidden: JAX_PROCESS_ID is set by the jax framework and may not be set by hand",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			children, err := pipeline.Build(tc.trainJob, &trainingruntime.Runtime{Kind: trainer.ClusterTrainingRuntimeKind, Name: "jax", Spec: &tc.runtime}, New())
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			rank := corev1.EnvVar{Name: EnvProcessID, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
				FieldPath: "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}}
			want := utiltesting.MakeJobSet(tc.trainJob, tc.runtime).NumNodes(tc.job, tc.nodes).
				ReplicatedJob(tc.job, func(j *jobsetv1alpha2.ReplicatedJob) {
					j.Template.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
				}).
				Container(tc.job, "node", func(c *corev1.Container) {
					c.Env = append([]corev1.EnvVar{rank}, tc.wantEnv...)
					c.Ports = []corev1.ContainerPort{{Name: "coordinator", ContainerPort: 29500, Protocol: corev1.ProtocolTCP}}
				}).Obj()
			if diff := cmp.Diff(want, utiltesting.FromApplyConfiguration[jobsetv1alpha2.JobSet](t, children.JobSet)); diff != "" {
				t.Errorf("JobSet (-want +got):\n%s", diff)
			}
		})
	}
}
