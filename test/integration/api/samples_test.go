package api

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/trainjob/operator/test/testenv"
)

// TestSamplesAreValid applies the shipped runtimes and every object in config/samples, as a user
// would with `kubectl apply --server-side`, and expects the API server to accept each one.
func TestSamplesAreValid(t *testing.T) {
	ns := newNamespace(t)
	kinds := map[string]bool{}
	for _, dir := range []string{"runtimes", "samples"} {
		objs, err := testenv.Kustomize(filepath.Join("..", "..", "..", "config", dir))
		require.NoError(t, err)
		for _, obj := range objs {
			t.Run(dir+"/"+obj.GetName(), func(t *testing.T) {
				if obj.GetKind() != "ClusterTrainingRuntime" {
					obj.SetNamespace(ns)
				}
				require.NoError(t, testenv.Apply(context.Background(), k8sClient, "samples-test", obj))
				kinds[obj.GetKind()] = true
			})
		}
	}
	for _, kind := range []string{"TrainJob", "TrainingRuntime", "ClusterTrainingRuntime"} {
		require.Truef(t, kinds[kind], "config/samples has no valid %s", kind)
	}
}

// TestEverySampleIsListed keeps config/samples/kustomization.yaml complete: a sample file it does
// not list would never be tested.
func TestEverySampleIsListed(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "config", "samples")
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	require.NoError(t, err)
	listed, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	require.NoError(t, err)
	for _, f := range files {
		if name := filepath.Base(f); name != "kustomization.yaml" {
			require.Containsf(t, string(listed), "- "+name, "config/samples/kustomization.yaml does not list %s", name)
		}
	}
}
