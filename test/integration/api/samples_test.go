package api

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestSamplesAreValid applies every object in config/samples, as a user would with
// `kubectl apply --server-side`, and expects the API server to accept each one.
func TestSamplesAreValid(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "..", "config", "samples", "*.yaml"))
	require.NoError(t, err)
	ns := newNamespace(t)
	kinds := map[string]bool{}
	for _, file := range files {
		if filepath.Base(file) == "kustomization.yaml" {
			continue
		}
		for _, obj := range readObjects(t, file) {
			t.Run(filepath.Base(file)+"/"+obj.GetName(), func(t *testing.T) {
				if obj.GetKind() != "ClusterTrainingRuntime" {
					obj.SetNamespace(ns)
				}
				require.NoError(t, k8sClient.Patch(context.Background(), obj, client.Apply,
					client.FieldOwner("samples-test"), client.ForceOwnership))
				kinds[obj.GetKind()] = true
			})
		}
	}
	for _, kind := range []string{"TrainJob", "TrainingRuntime", "ClusterTrainingRuntime"} {
		require.Truef(t, kinds[kind], "config/samples has no valid %s", kind)
	}
}

func readObjects(t *testing.T, file string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs []*unstructured.Unstructured
	for {
		obj := &unstructured.Unstructured{}
		if err := decoder.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return objs
		} else {
			require.NoError(t, err, file)
		}
		if len(obj.Object) > 0 {
			objs = append(objs, obj)
		}
	}
}
