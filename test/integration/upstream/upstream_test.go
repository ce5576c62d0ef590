package upstream

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	"sigs.k8s.io/yaml"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework/flux"
	"github.com/trainjob/operator/internal/framework/torch"
	"github.com/trainjob/operator/test/testenv"
)

// fixtures are the files in testdata that reproduce upstream's runtimes, by path: the main ones
// first, then the variants, which reuse their names.
func fixtures(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, dir := range []string{"manifests", "variants"} {
		require.NoError(t, filepath.WalkDir(filepath.Join("testdata", dir), func(path string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(path, ".yaml") {
				files = append(files, path)
			}
			return err
		}))
	}
	require.Len(t, files, 15)
	return files
}

// readRuntime reads the runtime object of one of testdata's files.
func readRuntime(t *testing.T, path string) *unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	objs, err := testenv.Decode(data)
	require.NoError(t, err)
	require.Len(t, objs, 1, "%s holds one runtime", path)
	return objs[0]
}

// sdkTrainer is spec.trainer as the Kubeflow SDK writes it for a runtime of each framework label:
// a CustomTrainer's command for torch, jax and xgboost, mpirun for the MPI runtimes, the
// BuiltinTrainer's `tune run` with config overrides for torchtune, a container's command for
// flux (one word an item: Flux's entrypoint splits the line at white space); two nodes where the
// framework runs several, with resources per node.
func sdkTrainer(framework string) map[string]any {
	gpus := map[string]any{"requests": map[string]any{"nvidia.com/gpu": 2}, "limits": map[string]any{"nvidia.com/gpu": 2}}
	cpus := map[string]any{"requests": map[string]any{"cpu": 2, "memory": "4Gi"}, "limits": map[string]any{"cpu": 2, "memory": "4Gi"}}
	switch framework {
	case "torchtune":
		return map[string]any{
			"command":          []any{"tune", "run"},
			"args":             []any{"dtype=bf16", "batch_size=2", "epochs=1", "dataset.data_dir=/workspace/dataset/data"},
			"resourcesPerNode": gpus,
		}
	case "deepspeed", "mlx", "mpi":
		return map[string]any{
			"numNodes":         2,
			"command":          []any{"mpirun", "--hostfile", "/etc/mpi/hostfile", "bash", "-c", "python3 /home/mpiuser/train.py"},
			"resourcesPerNode": gpus,
		}
	case "flux":
		return map[string]any{"numNodes": 2, "command": []any{"python3", "train.py"}, "resourcesPerNode": cpus}
	}
	return map[string]any{
		"numNodes":         2,
		"command":          []any{"bash", "-c", "python3 train.py"},
		"resourcesPerNode": cpus,
	}
}

// TestUpstreamRuntimesWorkUnchanged applies each of upstream Kubeflow Trainer's runtime objects as
// upstream has them (server-side apply, which refuses a field the schema lacks), through the
// operator's webhooks; checks that the API server stored every field as written (only defaults
// are added); and checks that a TrainJob of it, as the SDK writes it, is accepted and gets its
// JobSet, built by the runtime's framework (for Flux: its installer and entrypoint).
func TestUpstreamRuntimesWorkUnchanged(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	for i, path := range fixtures(t) {
		t.Run(strings.TrimPrefix(path, "testdata/"), func(t *testing.T) {
			written := readRuntime(t, path)
			require.NoError(t, testenv.Apply(ctx, k8sClient, "kubectl", written))
			stored := &unstructured.Unstructured{}
			stored.SetGroupVersionKind(written.GroupVersionKind())
			require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(written), stored))
			assertStoredAsWritten(t, "spec", written.Object["spec"], stored.Object["spec"])
			assert.Equal(t, written.GetLabels(), stored.GetLabels())

			tj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": trainer.GroupVersion.String(),
				"kind":       trainer.TrainJobKind,
				"metadata":   map[string]any{"name": fmt.Sprintf("job-%d", i), "namespace": ns},
				"spec": map[string]any{
					"runtimeRef": map[string]any{"name": written.GetName(), "kind": trainer.ClusterTrainingRuntimeKind, "apiGroup": trainer.GroupVersion.Group},
					"trainer":    sdkTrainer(written.GetLabels()[trainer.FrameworkLabel]),
				},
			}}
			require.NoError(t, k8sClient.Create(ctx, tj), "a TrainJob of %s, as the SDK writes it", written.GetName())
			js := &jobsetv1alpha2.JobSet{}
			require.Eventually(t, func() bool {
				return k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), js) == nil
			}, polling.Timeout, polling.Interval, "no JobSet for the TrainJob of %s", written.GetName())
			assert.Len(t, js.Spec.ReplicatedJobs, len(mustSlice(t, written, "spec", "template", "spec", "replicatedJobs")))
			if written.GetLabels()[trainer.FrameworkLabel] == flux.Name {
				pod := js.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec
				require.Len(t, pod.InitContainers, 1)
				assert.Equal(t, flux.InstallerContainer, pod.InitContainers[0].Name)
				assert.Equal(t, []string{"/bin/bash", flux.ScriptsPath + "/" + flux.EntrypointScriptKey, "python3", "train.py"}, pod.Containers[0].Command)
			}
		})
	}
}

// assertStoredAsWritten checks that every field of written is in stored with the same value; stored
// may have more (defaults). Numbers compare by value: YAML writes 2, the API server returns 2 as an
// integer.
func assertStoredAsWritten(t *testing.T, path string, written, stored any) {
	t.Helper()
	switch w := written.(type) {
	case map[string]any:
		s, ok := stored.(map[string]any)
		if !assert.Truef(t, ok, "%s: stored %v, written %v", path, stored, written) {
			return
		}
		for k, v := range w {
			if !assert.Containsf(t, s, k, "%s.%s was dropped", path, k) {
				continue
			}
			assertStoredAsWritten(t, path+"."+k, v, s[k])
		}
	case []any:
		s, ok := stored.([]any)
		if !assert.Truef(t, ok && len(s) == len(w), "%s: stored %v, written %v", path, stored, written) {
			return
		}
		for i := range w {
			assertStoredAsWritten(t, fmt.Sprintf("%s[%d]", path, i), w[i], s[i])
		}
	default:
		assert.Equalf(t, fmt.Sprint(written), fmt.Sprint(stored), "%s changed", path)
	}
}

func mustSlice(t *testing.T, obj *unstructured.Unstructured, fields ...string) []any {
	t.Helper()
	s, found, err := unstructured.NestedSlice(obj.Object, fields...)
	require.NoError(t, err)
	require.True(t, found, "%v", fields)
	return s
}

// TestTheSDKsTuneRunGetsUpstreamsCommandLine runs upstream's torchtune runtime for Llama 3.2 1B
// as the SDK's BuiltinTrainer does (TorchTuneConfig with LoRA, a Hugging Face dataset, a model
// from S3): the trainer runs `tune run` completed as upstream Kubeflow Trainer completes it, after
// the SDK's overrides; torchrun's size and rank are in the env and its rendezvous on the command
// line; each initializer downloads what the TrainJob names, whatever its scheme, with the
// TrainJob's env and credentials; the per-TrainJob volume is kept.
func TestTheSDKsTuneRunGetsUpstreamsCommandLine(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	require.NoError(t, testenv.Apply(ctx, k8sClient, "kubectl", readRuntime(t, "testdata/manifests/base/runtimes/torchtune/llama3_2/llama3_2_1B.yaml")))
	written := `
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: llama
  namespace: ` + ns + `
spec:
  runtimeRef:
    name: torchtune-llama3.2-1b
  initializer:
    dataset:
      storageUri: hf://tatsu-lab/alpaca/data
    model:
      storageUri: s3://models/meta-llama/Llama-3.2-1B-Instruct
      env:
        - name: ENDPOINT
          value: https://s3.example.com
      secretRef:
        name: s3-credentials
  trainer:
    command: [tune, run]
    args:
      - dtype=bf16
      - batch_size=2
      - epochs=1
      - loss=torchtune.modules.loss.CEWithChunkedOutputLoss
      - dataset.data_dir=/workspace/dataset/data
      - model.lora_rank=8
      - model.lora_attn_modules=[q_proj,v_proj]
    resourcesPerNode:
      requests:
        nvidia.com/gpu: 2
      limits:
        nvidia.com/gpu: 2
`
	tj := &trainer.TrainJob{}
	require.NoError(t, yaml.UnmarshalStrict([]byte(written), tj))
	require.NoError(t, k8sClient.Create(ctx, tj))

	js := &jobsetv1alpha2.JobSet{}
	require.Eventually(t, func() bool { return k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), js) == nil },
		polling.Timeout, polling.Interval)
	containers := map[string]corev1.Container{}
	for _, job := range js.Spec.ReplicatedJobs {
		containers[job.Name] = job.Template.Spec.Template.Spec.Containers[0]
	}

	node := containers["node"]
	assert.Equal(t, []string{
		"tune", "run", "--rdzv_endpoint=llama-node-0-0.llama:29400",
		torch.RecipeLoRADistributed, "--config", "llama3_2/1B_lora",
		"output_dir=/workspace/output", "tokenizer.path=/workspace/model/original/tokenizer.model", "checkpointer.checkpoint_dir=/workspace/model",
	}, node.Command)
	assert.Equal(t, tj.Spec.Trainer.Args, node.Args, "the SDK's overrides follow the command")
	vars := map[string]string{} // torchrun's, PET_*
	for _, e := range node.Env {
		if !strings.HasPrefix(e.Name, "PET_") {
			continue
		}
		vars[e.Name] = e.Value
		if e.ValueFrom != nil {
			vars[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	assert.Equal(t, map[string]string{
		torch.EnvNumNodes: "1", torch.EnvNumProcPerNode: "2", torch.EnvNodeRank: "metadata.annotations['batch.kubernetes.io/job-completion-index']",
	}, vars)

	dataset := containers["dataset-initializer"]
	assert.Equal(t, []corev1.EnvVar{{Name: "STORAGE_URI", Value: "hf://tatsu-lab/alpaca/data"}}, dataset.Env)
	model := containers["model-initializer"]
	assert.Equal(t, []corev1.EnvVar{
		{Name: "STORAGE_URI", Value: "s3://models/meta-llama/Llama-3.2-1B-Instruct"},
		{Name: "ENDPOINT", Value: "https://s3.example.com"},
	}, model.Env)
	assert.Equal(t, []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "s3-credentials"}}}}, model.EnvFrom)
	require.Len(t, js.Spec.VolumeClaimPolicies, 1)
	assert.Equal(t, "initializer", js.Spec.VolumeClaimPolicies[0].Templates[0].Name)
	for _, name := range []string{"dataset-initializer", "model-initializer", "node"} {
		assert.True(t, slices.ContainsFunc(containers[name].VolumeMounts, func(m corev1.VolumeMount) bool {
			return m.Name == "initializer" && m.MountPath == "/workspace"
		}), "%s mounts the TrainJob's volume at /workspace", name)
	}
}
