package torch

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/trainjob/operator/internal/framework"
)

// torchtune's `tune run` starts torchrun itself, from a recipe and a config that its command line
// names. The Kubeflow SDK's BuiltinTrainer leaves those to the operator: the TrainJob it writes
// for a torchtune runtime has the command `tune run` and, as args, only config overrides (dtype,
// epochs, the dataset's folder, LoRA settings). Upstream Kubeflow Trainer completes the command
// from the runtime's name (the model), the run's shape (nodes, processes, GPUs) and the args
// (LoRA, QLoRA), and from the paths the runtime's own command gives (where the initializers put
// the model, where the output goes); this file does the same, so that the SDK's TrainJobs run
// here unchanged.

// TuneEntrypoint is the command of a TrainJob whose command line the operator completes: exactly
// this, as the SDK writes it. Any other command is the TrainJob's own.
var TuneEntrypoint = []string{"tune", "run"}

// torchtune's recipes.
const (
	RecipeFullSingleDevice = "full_finetune_single_device"
	RecipeFullDistributed  = "full_finetune_distributed"
	RecipeLoRASingleDevice = "lora_finetune_single_device"
	RecipeLoRADistributed  = "lora_finetune_distributed"
)

// TuneModels are the models whose torchtune configs `tune run` is completed with, as torchtune
// names their config folder and size: a runtime named torchtune-llama3.2-1b fine-tunes
// llama3_2/1B, whose configs are llama3_2/1B_full, llama3_2/1B_lora_single_device, ...
var TuneModels = []string{"llama3_2/1B", "llama3_2/3B", "llama3_3/70B", "qwen2_5/1.5B"}

// multiNodeModel is the one model with a multi-node config (<model>_full_multinode).
const multiNodeModel = "llama3_3/70B"

// Config keys of a TrainJob's args that choose the recipe: LoRA's attention modules, QLoRA's
// quantized base model, and DoRA, which makes a quantized base model not QLoRA.
const (
	keyLoRAModules  = "model.lora_attn_modules"
	keyQuantizeBase = "model.quantize_base"
	keyUseDoRA      = "model.use_dora"
)

// TuneRuntimeKeys are config keys whose values are the runtime's: its trainer container's
// command sets them to the paths its volumes and initializers use, and `tune run` gets them from
// there. A TrainJob may not set them in its args.
var TuneRuntimeKeys = []string{"output_dir", "tokenizer.path", "tokenizer.merges_file", "checkpointer.checkpoint_dir"}

// runsTune reports whether the operator completes the TrainJob's command as `tune run`'s.
func runsTune(b *framework.Draft) bool {
	t := b.TrainJob.Spec.Trainer
	return t != nil && slices.Equal(t.Command, TuneEntrypoint)
}

// tuneCommand is the trainer container's command for a TrainJob whose command is `tune run`, run
// on b.NumNodes nodes of procs processes each:
//
//	tune run [--rdzv_endpoint=<first node>:29400] <recipe> --config <model><suffix> <runtime's paths>
//
// The TrainJob's args follow it, as the container's args. The rendezvous endpoint is given when
// the run has more than one process; torchrun's node count, processes per node and node rank are
// the PET_* env. A TrainJob that upstream Kubeflow Trainer refuses (a model it has no configs
// for, several nodes for a model without a multi-node config, LoRA on several nodes, QLoRA where
// the model has no such config, a runtime path set in the args) cannot be built, naming the field.
func tuneCommand(b *framework.Draft, procs int64) ([]string, error) {
	tj := b.TrainJob
	if b.MLPolicy().Torch.ElasticPolicy != nil {
		return nil, field.Invalid(framework.TrainerPath.Child("command"), strings.Join(TuneEntrypoint, " "),
			fmt.Sprintf("%s is elastic, and tune run takes a fixed number of nodes", b.Runtime))
	}
	model := TuneModel(tj.Spec.RuntimeRef.Name)
	if !slices.Contains(TuneModels, model) {
		return nil, field.Invalid(field.NewPath("spec", "runtimeRef", "name"), tj.Spec.RuntimeRef.Name, fmt.Sprintf(
			"tune run fine-tunes the model its runtime is named after, torchtune-<model>-<size>, one of %s", strings.Join(TuneModels, ", ")))
	}
	args := tj.Spec.Trainer.Args
	for i, arg := range args {
		if key, _, _ := strings.Cut(arg, "="); slices.Contains(TuneRuntimeKeys, key) {
			return nil, field.Forbidden(framework.TrainerPath.Child("args").Index(i),
				fmt.Sprintf("%s is the runtime's: its trainer command sets it to where its volumes are", key))
		}
	}
	if b.NumNodes > 1 && model != multiNodeModel {
		return nil, b.NumNodesError(fmt.Sprintf("torchtune fine-tunes %s on one node: only %s has a multi-node config", model, multiNodeModel))
	}
	lora, qlora := tuneLoRA(args)
	if b.NumNodes > 1 && lora >= 0 {
		return nil, b.NumNodesError(fmt.Sprintf("torchtune fine-tunes with LoRA (%s) on one node only", keyLoRAModules))
	}
	gpus := framework.GPUs(b.TrainerContainer())
	recipe, suffix := tuneRecipe(b.NumNodes, procs, gpus, lora >= 0, qlora >= 0)
	if qlora >= 0 {
		switch {
		case model == "qwen2_5/1.5B":
			return nil, field.Invalid(framework.TrainerPath.Child("args").Index(qlora), args[qlora],
				fmt.Sprintf("torchtune has no QLoRA config for %s", model))
		case suffix == "_qlora" && strings.HasPrefix(model, "llama3_2/"):
			return nil, field.Invalid(framework.TrainerPath.Child("args").Index(qlora), args[qlora], fmt.Sprintf(
				"torchtune fine-tunes %s with QLoRA on one device only: give the node 1 GPU (resourcesPerNode) or 1 process (numProcPerNode); it has %d of %d", model, procs, gpus))
		}
	}

	command := slices.Clone(TuneEntrypoint)
	if b.NumNodes > 1 || procs > 1 {
		command = append(command, fmt.Sprintf("--rdzv_endpoint=%s:%d", b.PodAddress(b.TrainerJob().Name, 0, 0), Port))
	}
	command = append(command, recipe, "--config", model+suffix)
	for _, c := range b.RuntimeTrainerContainer().Command {
		if key, _, _ := strings.Cut(c, "="); slices.Contains(TuneRuntimeKeys, key) {
			command = append(command, c)
		}
	}
	return command, nil
}

// TuneModel is the model a torchtune runtime fine-tunes, from its name,
// torchtune-<model>-<size>: torchtune-qwen2.5-1.5b is qwen2_5/1.5B. It is empty for a name of
// another shape.
func TuneModel(runtime string) string {
	parts := strings.Split(runtime, "-")
	if len(parts) != 3 {
		return ""
	}
	return strings.ReplaceAll(parts[1], ".", "_") + "/" + strings.ToUpper(parts[2])
}

// tuneRecipe chooses torchtune's recipe, and the suffix of its config after the model's name,
// for a run of nodes nodes of procs processes and gpus GPUs each, with LoRA or QLoRA or neither.
// One node that runs one process, or has one GPU, runs a single-device recipe.
func tuneRecipe(nodes int32, procs, gpus int64, lora, qlora bool) (recipe, suffix string) {
	switch {
	case nodes == 1 && (procs == 1 || gpus == 1):
		switch {
		case qlora:
			return RecipeLoRASingleDevice, "_qlora_single_device"
		case lora:
			return RecipeLoRASingleDevice, "_lora_single_device"
		}
		return RecipeFullSingleDevice, "_full_single_device"
	case nodes == 1 && qlora:
		return RecipeLoRADistributed, "_qlora"
	case nodes == 1 && lora:
		return RecipeLoRADistributed, "_lora"
	case nodes > 1:
		return RecipeFullDistributed, "_full_multinode"
	}
	return RecipeFullDistributed, "_full"
}

// tuneLoRA finds the args that ask for LoRA (LoRA's attention modules set) and QLoRA (the base
// model quantized, and DoRA not used), as the SDK writes them (model.quantize_base=True); each
// index is -1 when no arg does.
func tuneLoRA(args []string) (lora, qlora int) {
	lora, qlora = -1, -1
	dora := false
	for i, arg := range args {
		key, value, _ := strings.Cut(arg, "=")
		on, _ := strconv.ParseBool(value)
		switch key {
		case keyLoRAModules:
			if lora < 0 {
				lora = i
			}
		case keyQuantizeBase:
			if on && qlora < 0 {
				qlora = i
			}
		case keyUseDoRA:
			dora = dora || on
		}
	}
	if dora {
		qlora = -1
	}
	return lora, qlora
}
