package torch

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/pipeline"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/internal/trainingruntime"
)

// tuneRuntime is a runtime shaped like upstream's torchtune ones: its trainer runs torchtune's
// full distributed recipe on 2 GPUs, with the paths of the initializers' volume on its command.
func tuneRuntime(model string, policy trainer.TorchMLPolicySource, paths ...string) trainer.TrainingRuntimeSpec {
	rt := utiltesting.MakeRuntimeSpec().Torch(&policy).Obj()
	node := &rt.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[0]
	node.Image = "ghcr.io/kubeflow/trainer/torchtune-trainer"
	node.Command = append([]string{"tune", "run", "--rdzv_endpoint=localhost:29500", "full_finetune_distributed", "--config", model + "_full",
		"dataset=torchtune.datasets.instruct_dataset", "dataset.source=parquet", "dataset.data_dir=/workspace/dataset/data"}, paths...)
	node.Resources = *resources("", "2")
	return rt
}

var llamaPaths = []string{
	"output_dir=/workspace/output",
	"tokenizer.path=/workspace/model/original/tokenizer.model",
	"checkpointer.checkpoint_dir=/workspace/model",
}

// TestTuneRun: a TrainJob whose command is `tune run`, as the Kubeflow SDK's BuiltinTrainer writes
// it, gets the command line upstream Kubeflow Trainer gives it (its plugins/torch/torchtune.go and
// tests): the rendezvous when there is more than one process, the recipe and config for the run's
// shape, and the runtime's paths; torchrun's size and rank stay in the PET_* env.
func TestTuneRun(t *testing.T) {
	tj := func(runtime string, args ...string) *utiltesting.TrainJobWrapper {
		return utiltesting.MakeTrainJob("llama", "ns").RuntimeRef(trainer.ClusterTrainingRuntimeKind, runtime).
			Trainer(&trainer.Trainer{Command: []string{"tune", "run"}, Args: args})
	}
	llama := tuneRuntime("llama3_2/1B", trainer.TorchMLPolicySource{}, llamaPaths...)
	tuneEnv := func(nodes, procs string) []corev1.EnvVar {
		return []corev1.EnvVar{rankEnv, {Name: EnvNumNodes, Value: nodes}, {Name: EnvNumProcPerNode, Value: procs}}
	}
	const rdzv = "--rdzv_endpoint=llama-node-0-0.llama:29400"
	command := func(parts ...string) []string {
		return append(append([]string{"tune", "run"}, parts...), llamaPaths...)
	}
	sdkArgs := []string{"dtype=bf16", "batch_size=2", "epochs=1", "dataset.data_dir=/workspace/dataset/data"}

	cases := map[string]struct {
		runtime     trainer.TrainingRuntimeSpec
		trainJob    *trainer.TrainJob
		wantCommand []string
		wantArgs    []string
		wantEnv     []corev1.EnvVar
		wantErr     string
	}{
		"the SDK's TrainJob on the runtime's 2 GPUs: full distributed fine-tune, rendezvous on the first node, the SDK's args after": {
			runtime:     llama,
			trainJob:    tj("torchtune-llama3.2-1b", sdkArgs...).Obj(),
			wantCommand: command(rdzv, RecipeFullDistributed, "--config", "llama3_2/1B_full"),
			wantArgs:    sdkArgs,
			wantEnv:     tuneEnv("1", "2"),
		},
		"one GPU is a single-device fine-tune without a rendezvous": {
			runtime:     llama,
			trainJob:    tj("torchtune-llama3.2-1b").Trainer(&trainer.Trainer{Command: []string{"tune", "run"}, ResourcesPerNode: resources("", "1")}).Obj(),
			wantCommand: command(RecipeFullSingleDevice, "--config", "llama3_2/1B_full_single_device"),
			wantEnv:     tuneEnv("1", "1"),
		},
		"one process on 4 GPUs is a single-device fine-tune": {
			runtime: llama,
			trainJob: tj("torchtune-llama3.2-1b").Trainer(&trainer.Trainer{Command: []string{"tune", "run"},
				NumProcPerNode: ptr.To(intstr.FromInt32(1)), ResourcesPerNode: resources("", "4")}).Obj(),
			wantCommand: command(RecipeFullSingleDevice, "--config", "llama3_2/1B_full_single_device"),
			wantEnv:     tuneEnv("1", "1"),
		},
		"4 processes on 4 GPUs are distributed": {
			runtime: llama,
			trainJob: tj("torchtune-llama3.2-1b").Trainer(&trainer.Trainer{Command: []string{"tune", "run"},
				NumProcPerNode: ptr.To(intstr.FromInt32(4)), ResourcesPerNode: resources("", "4")}).Obj(),
			wantCommand: command(rdzv, RecipeFullDistributed, "--config", "llama3_2/1B_full"),
			wantEnv:     tuneEnv("1", "4"),
		},
		"LoRA on 2 GPUs is the distributed LoRA recipe": {
			runtime:     llama,
			trainJob:    tj("torchtune-llama3.2-1b", "model.lora_attn_modules=[q_proj,v_proj]", "model.lora_rank=8").Obj(),
			wantCommand: command(rdzv, RecipeLoRADistributed, "--config", "llama3_2/1B_lora"),
			wantArgs:    []string{"model.lora_attn_modules=[q_proj,v_proj]", "model.lora_rank=8"},
			wantEnv:     tuneEnv("1", "2"),
		},
		"LoRA on one GPU is the single-device LoRA recipe": {
			runtime: llama,
			trainJob: tj("torchtune-llama3.2-1b").Trainer(&trainer.Trainer{Command: []string{"tune", "run"},
				Args: []string{"model.lora_attn_modules=[q_proj]"}, ResourcesPerNode: resources("", "1")}).Obj(),
			wantCommand: command(RecipeLoRASingleDevice, "--config", "llama3_2/1B_lora_single_device"),
			wantArgs:    []string{"model.lora_attn_modules=[q_proj]"},
			wantEnv:     tuneEnv("1", "1"),
		},
		"QLoRA on one GPU is the single-device LoRA recipe with the QLoRA config": {
			runtime: llama,
			trainJob: tj("torchtune-llama3.2-1b").Trainer(&trainer.Trainer{Command: []string{"tune", "run"},
				Args: []string{"model.lora_attn_modules=[q_proj]", "model.quantize_base=True"}, ResourcesPerNode: resources("", "1")}).Obj(),
			wantCommand: command(RecipeLoRASingleDevice, "--config", "llama3_2/1B_qlora_single_device"),
			wantArgs:    []string{"model.lora_attn_modules=[q_proj]", "model.quantize_base=True"},
			wantEnv:     tuneEnv("1", "1"),
		},
		"QLoRA of a Llama 3.2 on 2 GPUs cannot be built: its QLoRA configs are single-device": {
			runtime:  llama,
			trainJob: tj("torchtune-llama3.2-1b", "model.lora_attn_modules=[q_proj]", "model.quantize_base=True").Obj(),
			wantErr:  `spec.trainer.args[1]: Invalid value: "model.quantize_base=True": torchtune fine-tunes llama3_2/1B with QLoRA on one device only: give the node 1 GPU (resourcesPerNode) or 1 process (numProcPerNode); it has 2 of 2`,
		},
		"QLoRA of Llama 3.3 70B on 8 GPUs is the distributed QLoRA config": {
			runtime:     tuneRuntime("llama3_3/70B", trainer.TorchMLPolicySource{}, llamaPaths...),
			trainJob:    tj("torchtune-llama3.3-70b", "model.quantize_base=True").Trainer(&trainer.Trainer{Command: []string{"tune", "run"}, Args: []string{"model.quantize_base=True"}, ResourcesPerNode: resources("", "8")}).Obj(),
			wantCommand: command(rdzv, RecipeLoRADistributed, "--config", "llama3_3/70B_qlora"),
			wantArgs:    []string{"model.quantize_base=True"},
			wantEnv:     tuneEnv("1", "8"),
		},
		"Llama 3.3 70B on 2 nodes is the multi-node config": {
			runtime:     tuneRuntime("llama3_3/70B", trainer.TorchMLPolicySource{}, llamaPaths...),
			trainJob:    tj("torchtune-llama3.3-70b").NumNodes(2).Obj(),
			wantCommand: command(rdzv, RecipeFullDistributed, "--config", "llama3_3/70B_full_multinode"),
			wantEnv:     tuneEnv("2", "2"),
		},
		"Llama 3.3 70B with LoRA on 2 nodes cannot be built": {
			runtime:  tuneRuntime("llama3_3/70B", trainer.TorchMLPolicySource{}, llamaPaths...),
			trainJob: tj("torchtune-llama3.3-70b", "model.lora_attn_modules=[q_proj]").NumNodes(2).Obj(),
			wantErr:  "spec.trainer.numNodes: Invalid value: 2: torchtune fine-tunes with LoRA (model.lora_attn_modules) on one node only",
		},
		"another model on 2 nodes cannot be built": {
			runtime:  llama,
			trainJob: tj("torchtune-llama3.2-1b").NumNodes(2).Obj(),
			wantErr:  "spec.trainer.numNodes: Invalid value: 2: torchtune fine-tunes llama3_2/1B on one node: only llama3_3/70B has a multi-node config",
		},
		"the runtime's 2 nodes name the runtime's field": {
			runtime: func() trainer.TrainingRuntimeSpec {
				rt := tuneRuntime("llama3_2/1B", trainer.TorchMLPolicySource{}, llamaPaths...)
				rt.MLPolicy.NumNodes = ptr.To[int32](2)
				return rt
			}(),
			trainJob: tj("torchtune-llama3.2-1b").Obj(),
			wantErr:  `TrainingRuntime "torchtune": spec.mlPolicy.numNodes: Invalid value: 2: torchtune fine-tunes llama3_2/1B on one node`,
		},
		"Qwen 2.5 gets its tokenizer's merges file from the runtime": {
			runtime: tuneRuntime("qwen2_5/1.5B", trainer.TorchMLPolicySource{},
				"output_dir=/workspace/output", "tokenizer.path=/workspace/model/vocab.json", "tokenizer.merges_file=/workspace/model/merges.txt", "checkpointer.checkpoint_dir=/workspace/model"),
			trainJob: tj("torchtune-qwen2.5-1.5b").Obj(),
			wantCommand: []string{"tune", "run", rdzv, RecipeFullDistributed, "--config", "qwen2_5/1.5B_full",
				"output_dir=/workspace/output", "tokenizer.path=/workspace/model/vocab.json", "tokenizer.merges_file=/workspace/model/merges.txt", "checkpointer.checkpoint_dir=/workspace/model"},
			wantEnv: tuneEnv("1", "2"),
		},
		"QLoRA of Qwen 2.5 cannot be built: torchtune has no such config": {
			runtime:  tuneRuntime("qwen2_5/1.5B", trainer.TorchMLPolicySource{}),
			trainJob: tj("torchtune-qwen2.5-1.5b").Trainer(&trainer.Trainer{Command: []string{"tune", "run"}, Args: []string{"model.quantize_base=True"}, ResourcesPerNode: resources("", "1")}).Obj(),
			wantErr:  `spec.trainer.args[0]: Invalid value: "model.quantize_base=True": torchtune has no QLoRA config for qwen2_5/1.5B`,
		},
		"a runtime not named after a model torchtune is configured for cannot run tune run": {
			runtime:  llama,
			trainJob: tj("torch-distributed").Obj(),
			wantErr:  `spec.runtimeRef.name: Invalid value: "torch-distributed": tune run fine-tunes the model its runtime is named after, torchtune-<model>-<size>, one of llama3_2/1B, llama3_2/3B, llama3_3/70B, qwen2_5/1.5B`,
		},
		"a path the runtime sets may not be set in the args": {
			runtime:  llama,
			trainJob: tj("torchtune-llama3.2-1b", "epochs=1", "output_dir=/tmp").Obj(),
			wantErr:  "spec.trainer.args[1]: Forbidden: output_dir is the runtime's: its trainer command sets it to where its volumes are",
		},
		"an elastic runtime cannot run tune run": {
			runtime:  tuneRuntime("llama3_2/1B", trainer.TorchMLPolicySource{ElasticPolicy: &trainer.TorchElasticPolicy{MinNodes: ptr.To[int32](1)}}),
			trainJob: tj("torchtune-llama3.2-1b").Obj(),
			wantErr:  `spec.trainer.command: Invalid value: "tune run": TrainingRuntime "torchtune" is elastic, and tune run takes a fixed number of nodes`,
		},
		"a longer command is the TrainJob's own, with torchrun's static rendezvous in the env": {
			runtime:     llama,
			trainJob:    tj("torchtune-llama3.2-1b").Trainer(&trainer.Trainer{Command: []string{"tune", "run", "my_recipe", "--config", "my.yaml"}}).Obj(),
			wantCommand: []string{"tune", "run", "my_recipe", "--config", "my.yaml"},
			wantEnv:     static1("1", "2"),
		},
		"without a command of its own, the TrainJob runs the runtime's": {
			runtime:     llama,
			trainJob:    utiltesting.MakeTrainJob("llama", "ns").RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torchtune-llama3.2-1b").Obj(),
			wantCommand: llama.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[0].Command,
			wantEnv:     static1("1", "2"),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rt := &trainingruntime.Runtime{Kind: trainer.TrainingRuntimeKind, Name: "torchtune", Spec: &tc.runtime}
			children, err := pipeline.Build(tc.trainJob, rt, New(""))
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			node := utiltesting.FromApplyConfiguration[jobsetv1alpha2.JobSet](t, children.JobSet).Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[0]
			if diff := cmp.Diff(tc.wantCommand, node.Command); diff != "" {
				t.Errorf("command (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantArgs, node.Args); diff != "" {
				t.Errorf("args (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantEnv, node.Env); diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
			require.Equal(t, []corev1.ContainerPort{{Name: "torchrun", ContainerPort: Port, Protocol: corev1.ProtocolTCP}}, node.Ports)
		})
	}
}

// static1 is torchrun's env for the TrainJob "llama" with the static rendezvous on its first node.
func static1(nodes, procs string) []corev1.EnvVar {
	return []corev1.EnvVar{
		rankEnv,
		{Name: EnvNumNodes, Value: nodes},
		{Name: EnvNumProcPerNode, Value: procs},
		{Name: EnvMasterAddr, Value: "llama-node-0-0.llama"},
		{Name: EnvMasterPort, Value: "29400"},
	}
}

func TestTuneModel(t *testing.T) {
	for runtime, want := range map[string]string{
		"torchtune-llama3.2-1b":       "llama3_2/1B",
		"torchtune-llama3.2-3b":       "llama3_2/3B",
		"torchtune-llama3.3-70b":      "llama3_3/70B",
		"torchtune-qwen2.5-1.5b":      "qwen2_5/1.5B",
		"torchtune-llama3.2":          "",
		"torchtune-llama3.2-1b-extra": "",
		"":                            "",
	} {
		require.Equalf(t, want, TuneModel(runtime), "the model of runtime %q", runtime)
	}
}

func TestTuneLoRA(t *testing.T) {
	cases := map[string]struct {
		args              []string
		wantLoRA, wantQLo int
	}{
		"LoRA's attention modules ask for LoRA":            {args: []string{"batch_size=32", "model.lora_attn_modules=['q_proj','v_proj']"}, wantLoRA: 1, wantQLo: -1},
		"no LoRA args":                                     {args: []string{"batch_size=32", "epochs=10"}, wantLoRA: -1, wantQLo: -1},
		"no args":                                          {wantLoRA: -1, wantQLo: -1},
		"a quantized base model is QLoRA":                  {args: []string{"model.quantize_base=True"}, wantLoRA: -1, wantQLo: 0},
		"a base model not quantized is not":                {args: []string{"model.quantize_base=False"}, wantLoRA: -1, wantQLo: -1},
		"DoRA is not QLoRA, even with a quantized base":    {args: []string{"model.quantize_base=True", "model.use_dora=True"}, wantLoRA: -1, wantQLo: -1},
		"DoRA turned off leaves QLoRA":                     {args: []string{"model.use_dora=False", "model.quantize_base=True"}, wantLoRA: -1, wantQLo: 1},
		"a key that only starts like LoRA's is not LoRA's": {args: []string{"model.lora_attn_modules_extra=1"}, wantLoRA: -1, wantQLo: -1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			lora, qlora := tuneLoRA(tc.args)
			require.Equal(t, [2]int{tc.wantLoRA, tc.wantQLo}, [2]int{lora, qlora})
		})
	}
}
