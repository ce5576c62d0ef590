package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	"sigs.k8s.io/yaml"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/test/testenv"
)

// applyUpstream applies a file of testdata/upstream, written in upstream Kubeflow Trainer v2.3's
// shapes, as a user does, with its TrainJob in namespace ns, and returns the TrainJob.
func applyUpstream(t *testing.T, file, ns string) *trainer.TrainJob {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "upstream", file))
	require.NoError(t, err)
	var tj *trainer.TrainJob
	for _, doc := range strings.Split(string(data), "\n---\n") {
		obj := &unstructured.Unstructured{}
		require.NoError(t, yaml.Unmarshal([]byte(doc), &obj.Object))
		if obj.GetKind() == "TrainJob" {
			obj.SetNamespace(ns)
			tj = &trainer.TrainJob{}
			require.NoError(t, fromUnstructured(obj, tj))
		}
		require.NoError(t, testenv.Apply(context.Background(), k8sClient, "kubectl", obj), "applying %s %s", obj.GetKind(), obj.GetName())
	}
	require.NotNil(t, tj, "%s has no TrainJob", file)
	return tj
}

// env returns a container's env vars that have plain values, by name.
func env(c corev1.Container) map[string]string {
	m := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			m[e.Name] = e.Value
		}
	}
	return m
}

// replicatedJob returns the JobSet's replicated job of the given name.
func replicatedJob(t *testing.T, js *jobsetv1alpha2.JobSet, name string) jobsetv1alpha2.ReplicatedJob {
	t.Helper()
	for _, job := range js.Spec.ReplicatedJobs {
		if job.Name == name {
			return job
		}
	}
	t.Fatalf("JobSet %s has no replicated job %q", js.Name, name)
	return jobsetv1alpha2.ReplicatedJob{}
}

// TestUpstreamShapesRunToComplete applies a runtime and a TrainJob written in upstream's shapes
// for each kind of runtime upstream ships (testdata/upstream), checks the JobSet each produces,
// and runs each to Complete.
func TestUpstreamShapesRunToComplete(t *testing.T) {
	ns := newNamespace(t)
	cases := map[string]func(t *testing.T, js *jobsetv1alpha2.JobSet){
		"torch.yaml": func(t *testing.T, js *jobsetv1alpha2.JobSet) {
			node := replicatedJob(t, js, "node")
			assert.Equal(t, ptr.To[int32](2), node.Template.Spec.Parallelism)
			vars := env(node.Template.Spec.Template.Spec.Containers[0])
			assert.Equal(t, "2", vars["PET_NNODES"])
			assert.Equal(t, "2", vars["PET_NPROC_PER_NODE"], "the SDK's integer numProcPerNode")
			assert.Equal(t, "1", vars["EPOCHS"])
		},
		"deepspeed.yaml": func(t *testing.T, js *jobsetv1alpha2.JobSet) {
			assert.Equal(t, ptr.To[int32](1), replicatedJob(t, js, "launcher").Template.Spec.Parallelism)
			assert.Equal(t, ptr.To[int32](0), replicatedJob(t, js, "node").Template.Spec.Parallelism, "on one node, the launcher is the only one")
			hostfile := &corev1.ConfigMap{}
			require.NoError(t, k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "deepspeed-mpi-hostfile"}, hostfile))
			assert.Equal(t, "deepspeed-launcher-0-0.deepspeed slots=1\n", hostfile.Data["hostfile"])
			launcher := replicatedJob(t, js, "launcher").Template.Spec.Template.Spec
			assert.True(t, mountsVolume(&corev1.Pod{Spec: launcher}, "mpi-ssh-auth", "/home/mpiuser/.ssh"))
		},
		"jax.yaml": func(t *testing.T, js *jobsetv1alpha2.JobSet) {
			node := replicatedJob(t, js, "node")
			assert.Equal(t, ptr.To[int32](3), node.Template.Spec.Parallelism)
			assert.Equal(t, "3", env(node.Template.Spec.Template.Spec.Containers[0])["JAX_NUM_PROCESSES"])
		},
		"xgboost.yaml": func(t *testing.T, js *jobsetv1alpha2.JobSet) {
			node := replicatedJob(t, js, "node")
			assert.Equal(t, "4", env(node.Template.Spec.Template.Spec.Containers[0])["DMLC_NUM_WORKER"], "2 nodes of 2 GPUs")
		},
		"flux.yaml": func(t *testing.T, js *jobsetv1alpha2.JobSet) {
			node := replicatedJob(t, js, "node")
			assert.Equal(t, ptr.To[int32](2), node.Template.Spec.Parallelism)
			pod := node.Template.Spec.Template.Spec
			require.Len(t, pod.InitContainers, 1)
			assert.Equal(t, "flux-installer", pod.InitContainers[0].Name)
			assert.Equal(t, []string{"/bin/bash", "/etc/flux-config/entrypoint.sh", "lmp_gpu", "-k", "on", "g", "1", "-sf", "kk", "-in", "in.reaxff.hns", "-nocite"},
				pod.Containers[0].Command)
			assert.True(t, mountsVolume(&corev1.Pod{Spec: pod}, "flux-curve", "/curve"))
			scripts := &corev1.ConfigMap{}
			require.NoError(t, k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "lammps-flux-flux-entrypoint"}, scripts))
			assert.Contains(t, scripts.Data["entrypoint.sh"], `flags="-N 2 -n 2 -g 1"`, "one GPU per node and task")
			require.NoError(t, k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "lammps-flux-flux-curve"}, &corev1.Secret{}))
		},
		"torchtune.yaml": func(t *testing.T, js *jobsetv1alpha2.JobSet) {
			dataset := replicatedJob(t, js, "dataset-initializer").Template.Spec.Template.Spec.Containers[0]
			assert.Equal(t, "hf://databricks/databricks-dolly-15k", env(dataset)["STORAGE_URI"])
			model := replicatedJob(t, js, "model-initializer").Template.Spec.Template.Spec.Containers[0]
			assert.Equal(t, map[string]string{"STORAGE_URI": "hf://meta-llama/Llama-3.2-3B-Instruct", "ACCESS_TOKEN": "hf_token"}, env(model))
			node := replicatedJob(t, js, "node")
			assert.Equal(t, ptr.To[int32](2), node.Template.Spec.Parallelism)
			assert.Equal(t, "4", env(node.Template.Spec.Template.Spec.Containers[0])["PET_NPROC_PER_NODE"], "auto: one per GPU")
		},
	}
	tjs := map[string]*trainer.TrainJob{}
	for file := range cases {
		tjs[file] = applyUpstream(t, file, ns)
	}
	for file, check := range cases {
		t.Run(file, func(t *testing.T) {
			waitForComplete(t, tjs[file])
			js := &jobsetv1alpha2.JobSet{}
			require.NoError(t, k8sClient.Get(context.Background(), client.ObjectKeyFromObject(tjs[file]), js))
			check(t, js)
		})
	}
}
