package pipeline_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
	"github.com/trainjob/operator/internal/framework/jax"
	"github.com/trainjob/operator/internal/framework/mpi"
	"github.com/trainjob/operator/internal/framework/plain"
	"github.com/trainjob/operator/internal/framework/torch"
	"github.com/trainjob/operator/internal/framework/xgboost"
	"github.com/trainjob/operator/internal/pipeline"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/internal/trainingruntime"
)

// BenchmarkBuild measures what building one TrainJob's children costs the controllers, per
// framework, with trainer values, an initializer-free runtime, overrides and a coscheduling gang.
func BenchmarkBuild(b *testing.B) {
	cases := map[string]struct {
		fw   framework.Framework
		spec *utiltesting.RuntimeSpecWrapper
	}{
		"plain":   {plain.New(), utiltesting.MakeRuntimeSpec()},
		"torch":   {torch.New(""), utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{NumProcPerNode: ptr.To(intstr.FromString("auto"))})},
		"xgboost": {xgboost.New(), utiltesting.MakeRuntimeSpec().XGBoost(&trainer.XGBoostMLPolicySource{})},
		"jax":     {jax.New(), utiltesting.MakeRuntimeSpec().JAX()},
		"mpi": {mpi.New(), utiltesting.MakeRuntimeSpec().ReplicatedJobs(
			utiltesting.ReplicatedJob("launcher", trainer.AncestorTrainer, "node"),
			utiltesting.ReplicatedJob("node", "", "node"),
		).MPI(&trainer.MPIMLPolicySource{})},
	}
	for name, tc := range cases {
		spec := tc.spec.NumNodes(4).PodGroupPolicy(trainer.PodGroupPolicySource{
			Coscheduling: &trainer.CoschedulingPodGroupPolicySource{},
		}).Obj()
		rt := &trainingruntime.Runtime{Kind: trainer.ClusterTrainingRuntimeKind, Name: name, Spec: &spec}
		tj := utiltesting.MakeTrainJob("bench", "ns").Trainer(&trainer.Trainer{
			Image: ptr.To("img"), Env: []corev1.EnvVar{{Name: "EPOCHS", Value: "3"}},
			ResourcesPerNode: &corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}},
		}).PodSpecOverrides(trainer.PodSpecOverride{PodSpecPatch: trainer.PodSpecPatch{NodeSelector: map[string]string{"pool": "gpu"}}}).Obj()
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := pipeline.Build(tj, rt, tc.fw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
