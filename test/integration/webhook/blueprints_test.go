package webhook

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework/mpi"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

// sdkTrainer is spec.trainer as the Kubeflow SDK writes it for a runtime of the framework label:
// the BuiltinTrainer's `tune run` with config overrides for torchtune, mpirun on two nodes of two
// GPUs for the MPI runtimes, a CustomTrainer's command on two nodes for the others.
func sdkTrainer(framework string) *trainer.Trainer {
	gpus := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}
	switch framework {
	case "torchtune":
		return &trainer.Trainer{
			Command:          []string{"tune", "run"},
			Args:             []string{"dtype=bf16", "epochs=1", "dataset.data_dir=/workspace/dataset/data"},
			ResourcesPerNode: &corev1.ResourceRequirements{Requests: gpus, Limits: gpus},
		}
	case "deepspeed", "mlx", "mpi":
		return &trainer.Trainer{
			NumNodes:         ptr.To[int32](2),
			Command:          []string{"mpirun", "--hostfile", "/etc/mpi/hostfile", "python3", "/home/mpiuser/train.py"},
			ResourcesPerNode: &corev1.ResourceRequirements{Requests: gpus, Limits: gpus},
		}
	}
	return &trainer.Trainer{NumNodes: ptr.To[int32](2), Command: []string{"bash", "-c", "python3 train.py"}}
}

// TestEveryShippedRuntimeRunsTheSDKsTrainJobs: a TrainJob of each shipped runtime, as the Kubeflow
// SDK writes it for the runtime's framework label, is accepted and gets its JobSet. The LLM
// blueprints get what upstream Kubeflow Trainer gives them: DeepSpeed and MLX one MPI slot per
// GPU, the launcher first in the hostfile; the torchtune runtimes their recipe, config and paths.
func TestEveryShippedRuntimeRunsTheSDKsTrainJobs(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	runtimes, err := testenv.Kustomize(filepath.Join("..", "..", "..", "config", "runtimes"))
	require.NoError(t, err)
	for _, rt := range runtimes {
		t.Run(rt.GetName(), func(t *testing.T) {
			framework := rt.GetLabels()[trainer.FrameworkLabel]
			require.NotEmpty(t, framework, "the SDK lists runtimes by their framework label")
			tj := utiltesting.MakeTrainJob(strings.ReplaceAll(rt.GetName(), ".", "-"), ns).
				RuntimeRef(trainer.ClusterTrainingRuntimeKind, rt.GetName()).Trainer(sdkTrainer(framework)).Obj()
			require.NoError(t, k8sClient.Create(ctx, tj))
			js := utiltesting.WaitFor(t, k8sClient, utiltesting.Polling{Timeout: timeout, Interval: interval},
				client.ObjectKeyFromObject(tj), &jobsetv1alpha2.JobSet{}, func(*assert.CollectT, *jobsetv1alpha2.JobSet) {})

			switch framework {
			case "deepspeed", "mlx":
				hostfile := utiltesting.WaitFor(t, k8sClient, utiltesting.Polling{Timeout: timeout, Interval: interval},
					client.ObjectKey{Namespace: ns, Name: tj.Name + mpi.HostfileConfigMapSuffix}, &corev1.ConfigMap{},
					func(*assert.CollectT, *corev1.ConfigMap) {})
				assert.Equal(t, tj.Name+"-launcher-0-0."+tj.Name+" slots=2\n"+tj.Name+"-node-0-0."+tj.Name+" slots=2\n",
					hostfile.Data[mpi.HostfileKey], "the launcher is the first node; a slot per GPU")
			case "torchtune":
				node := js.Spec.ReplicatedJobs[len(js.Spec.ReplicatedJobs)-1]
				require.Equal(t, "node", node.Name)
				command := node.Template.Spec.Template.Spec.Containers[0].Command
				model := map[string]string{
					"torchtune-llama3.2-1b": "llama3_2/1B", "torchtune-llama3.2-3b": "llama3_2/3B", "torchtune-qwen2.5-1.5b": "qwen2_5/1.5B",
				}[rt.GetName()]
				require.NotEmpty(t, model, "a torchtune runtime this test does not know: add its model")
				require.GreaterOrEqual(t, len(command), 9)
				assert.Equal(t, []string{"tune", "run", "--rdzv_endpoint=" + tj.Name + "-node-0-0." + tj.Name + ":29400", "full_finetune_distributed", "--config", model + "_full"}, command[:6])
				assert.Equal(t, "output_dir=/workspace/output", command[6])
				assert.Equal(t, "checkpointer.checkpoint_dir=/workspace/model", command[len(command)-1])
				assert.Len(t, js.Spec.VolumeClaimPolicies, 1, "the initializers' volume")
			}
			if rt.GetName() == "grpo-distributed" { // upstream #3718: the SDK's CustomTrainer under torchrun, on the initializers' volume
				node := js.Spec.ReplicatedJobs[len(js.Spec.ReplicatedJobs)-1]
				c := node.Template.Spec.Template.Spec.Containers[0]
				assert.Equal(t, sdkTrainer("torch").Command, c.Command, "the SDK's command")
				assert.Subset(t, c.Env, []corev1.EnvVar{{Name: "MODEL_PATH", Value: "/workspace/model"}, {Name: "DATASET_PATH", Value: "/workspace/dataset"},
					{Name: "PET_NNODES", Value: "2"}}, "the runtime's paths and torchrun's wiring")
				assert.Len(t, js.Spec.VolumeClaimPolicies, 1, "the initializers' volume")
			}
		})
	}
}
