package api

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// A TrainJob as upstream Kubeflow Trainer v2.2+, its SDK and Kueue write it is stored as written:
// numProcPerNode as an integer, runtimePatches with Kueue's placement and a time, and an active
// deadline. Nothing is pruned, so a tool that reads it back with upstream's types finds it all.
func TestUpstreamTrainJobIsStoredAsWritten(t *testing.T) {
	ns := newNamespace(t)
	written := `
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: upstream
  namespace: ` + ns + `
  labels:
    kueue.x-k8s.io/queue-name: team-a
spec:
  runtimeRef:
    name: torch-distributed
    apiGroup: trainer.kubeflow.org
    kind: ClusterTrainingRuntime
  suspend: true
  activeDeadlineSeconds: 3600
  trainer:
    numNodes: 2
    numProcPerNode: 4
  runtimePatches:
  - manager: kueue.x-k8s.io/manager
    time: "2026-11-22T10:00:00Z"
    trainingRuntimeSpec:
      template:
        metadata:
          labels:
            team: a
        spec:
          replicatedJobs:
          - name: node
            template:
              metadata:
                annotations:
                  on: job
              spec:
                template:
                  metadata:
                    labels:
                      kueue.x-k8s.io/podset: node
                  spec:
                    nodeSelector:
                      cloud.google.com/gke-accelerator: nvidia-a100
                    tolerations:
                    - key: nvidia.com/gpu
                      operator: Exists
                      effect: NoSchedule
                    schedulingGates:
                    - name: kueue.x-k8s.io/topology
                    securityContext:
                      runAsUser: 1000
                    containers:
                    - name: node
                      securityContext:
                        allowPrivilegeEscalation: false
`
	obj := &unstructured.Unstructured{}
	require.NoError(t, yaml.Unmarshal([]byte(written), &obj.Object))
	want, err := yaml.Marshal(obj.Object["spec"])
	require.NoError(t, err)
	require.NoError(t, k8sClient.Create(context.Background(), obj))

	stored := obj.Object["spec"].(map[string]any)
	delete(stored, "managedBy") // The only field the API server adds: a default.
	got, err := yaml.Marshal(stored)
	require.NoError(t, err)
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("stored spec differs from the written one (-written +stored):\n%s", diff)
	}
}

// A runtime as upstream Kubeflow Trainer writes it, with torch's envInjection and Volcano's
// networkTopology, is stored as written: neither is pruned.
func TestUpstreamRuntimeIsStoredAsWritten(t *testing.T) {
	ns := newNamespace(t)
	written := `
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainingRuntime
metadata:
  name: upstream
  namespace: ` + ns + `
spec:
  mlPolicy:
    numNodes: 2
    torch:
      numProcPerNode: auto
      envInjection:
        targets:
        - jobName: node
          containerNames: [profiler, wait-for-master]
  podGroupPolicy:
    volcano:
      networkTopology:
        mode: soft
        highestTierAllowed: 2
  template:
    metadata:
      annotations:
        scheduling.volcano.sh/queue-name: research
    spec:
      replicatedJobs:
      - name: node
        template:
          metadata:
            labels:
              trainer.kubeflow.org/trainjob-ancestor-step: trainer
          spec:
            template:
              spec:
                initContainers:
                - name: wait-for-master
                  image: busybox
                containers:
                - name: node
                  image: pytorch
                - name: profiler
                  image: busybox
`
	obj := &unstructured.Unstructured{}
	require.NoError(t, yaml.Unmarshal([]byte(written), &obj.Object))
	want, err := yaml.Marshal(obj.Object["spec"].(map[string]any)["mlPolicy"])
	require.NoError(t, err)
	wantPolicy, err := yaml.Marshal(obj.Object["spec"].(map[string]any)["podGroupPolicy"])
	require.NoError(t, err)
	require.NoError(t, k8sClient.Create(context.Background(), obj))

	got, err := yaml.Marshal(obj.Object["spec"].(map[string]any)["mlPolicy"])
	require.NoError(t, err)
	gotPolicy, err := yaml.Marshal(obj.Object["spec"].(map[string]any)["podGroupPolicy"])
	require.NoError(t, err)
	if diff := cmp.Diff(string(want)+string(wantPolicy), string(got)+string(gotPolicy)); diff != "" {
		t.Errorf("stored mlPolicy and podGroupPolicy differ from the written ones (-written +stored):\n%s", diff)
	}
}
