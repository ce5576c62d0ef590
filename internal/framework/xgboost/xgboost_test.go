package xgboost

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/pipeline"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/internal/trainingruntime"
)

func TestXGBoost(t *testing.T) {
	gpus := func(n string) *corev1.ResourceRequirements {
		return &corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(n)}}
	}
	cpus := &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")}}
	env := func(port, workers string) []corev1.EnvVar {
		return []corev1.EnvVar{
			{Name: EnvTaskID, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
				FieldPath: "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}},
			{Name: EnvTrackerURI, Value: "boost-node-0-0.boost"},
			{Name: EnvTrackerPort, Value: port},
			{Name: EnvNumWorker, Value: workers},
		}
	}
	cases := map[string]struct {
		policy    trainer.XGBoostMLPolicySource
		numNodes  int32
		resources *corev1.ResourceRequirements
		wantEnv   []corev1.EnvVar
		wantPort  int32
	}{
		// The table of KEP-2598.
		"4 CPU nodes are 4 workers": {
			numNodes: 4, resources: cpus,
			wantEnv: env("9091", "4"), wantPort: 9091,
		},
		"2 nodes of 4 GPUs are 8 workers": {
			numNodes: 2, resources: gpus("4"),
			wantEnv: env("9091", "8"), wantPort: 9091,
		},
		"1 node of 8 GPUs is 8 workers": {
			numNodes: 1, resources: gpus("8"),
			wantEnv: env("9091", "8"), wantPort: 9091,
		},
		"numWorkersPerNode wins over the GPU count": {
			policy:   trainer.XGBoostMLPolicySource{NumWorkersPerNode: ptr.To[int32](2)},
			numNodes: 3, resources: gpus("8"),
			wantEnv: env("9091", "6"), wantPort: 9091,
		},
		"a custom tracker port is in the env and the container port": {
			policy:   trainer.XGBoostMLPolicySource{TrackerPort: ptr.To[int32](9099)},
			numNodes: 2,
			wantEnv:  env("9099", "2"), wantPort: 9099,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			spec := utiltesting.MakeRuntimeSpec().XGBoost(&tc.policy).Obj()
			tj := utiltesting.MakeTrainJob("boost", "ns").Trainer(&trainer.Trainer{NumNodes: &tc.numNodes, ResourcesPerNode: tc.resources}).Obj()
			children, err := pipeline.Build(tj, &trainingruntime.Runtime{Kind: trainer.ClusterTrainingRuntimeKind, Name: "xgboost", Spec: &spec}, New())
			require.NoError(t, err)

			want := utiltesting.MakeJobSet(tj, spec).NumNodes("node", tc.numNodes).
				ReplicatedJob("node", func(j *jobsetv1alpha2.ReplicatedJob) {
					j.Template.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
				}).
				Container("node", "node", func(c *corev1.Container) {
					if tc.resources != nil {
						c.Resources = *tc.resources
					}
					c.Env = tc.wantEnv
					c.Ports = []corev1.ContainerPort{{Name: "tracker", ContainerPort: tc.wantPort, Protocol: corev1.ProtocolTCP}}
				}).Obj()
			if diff := cmp.Diff(want, utiltesting.FromApplyConfiguration[jobsetv1alpha2.JobSet](t, children.JobSet)); diff != "" {
				t.Errorf("JobSet (-want +got):\n%s", diff)
			}
		})
	}
}

func TestXGBoostReservesItsEnv(t *testing.T) {
	spec := utiltesting.MakeRuntimeSpec().XGBoost(&trainer.XGBoostMLPolicySource{}).Obj()
	tj := utiltesting.MakeTrainJob("boost", "ns").Trainer(&trainer.Trainer{Env: []corev1.EnvVar{{Name: EnvNumWorker, Value: "3"}}}).Obj()
	_, err := pipeline.Build(tj, &trainingruntime.Runtime{Kind: trainer.ClusterTrainingRuntimeKind, Name: "xgboost", Spec: &spec}, New())
	require.ErrorContains(t, err, "spec.trainer.env[0].name: Forbidden: DMLC_NUM_WORKER is set by the xgboost framework and may not be set by hand")
}
