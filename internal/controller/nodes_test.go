package controller

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	"sigs.k8s.io/yaml"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
	"github.com/trainjob/operator/internal/pipeline"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/internal/trainingruntime"
)

// TestAnMPITrainJobsNodesAreItsNodes: a TrainJob of the shipped mpi-distributed runtime on 3
// nodes has 3 nodes (NODES, the scale subresource), its node job's pods, and not 1, its launcher
// (the job labelled as the trainer); with runLauncherAsNode, the launcher is one of the 3.
func TestAnMPITrainJobsNodesAreItsNodes(t *testing.T) {
	data, err := os.ReadFile("../../config/runtimes/mpi_distributed.yaml")
	require.NoError(t, err)
	shipped := &trainer.ClusterTrainingRuntime{}
	require.NoError(t, yaml.Unmarshal(data, shipped))
	for name, tc := range map[string]struct {
		launcherAsNode bool
		selector       string
	}{
		"the launcher apart":     {false, "jobset.sigs.k8s.io/jobset-name=tj,jobset.sigs.k8s.io/replicatedjob-name in (node)"},
		"the launcher as a node": {true, "jobset.sigs.k8s.io/jobset-name=tj,jobset.sigs.k8s.io/replicatedjob-name in (launcher,node)"},
	} {
		t.Run(name, func(t *testing.T) {
			spec := shipped.Spec.DeepCopy()
			spec.MLPolicy.MPI.RunLauncherAsNode = ptr.To(tc.launcherAsNode)
			for i := range spec.Template.Spec.ReplicatedJobs {
				spec.Template.Spec.ReplicatedJobs[i].Replicas = 1 // The CRD's default, as the API server stores it.
			}
			rt := &trainingruntime.Runtime{Kind: trainer.ClusterTrainingRuntimeKind, Name: shipped.Name, Spec: spec}
			tj := utiltesting.MakeTrainJob("tj", "ns").RuntimeRef(trainer.ClusterTrainingRuntimeKind, shipped.Name).NumNodes(3).Obj()
			children, err := pipeline.Build(tj, rt, framework.Select(Frameworks(""), spec.MLPolicy))
			require.NoError(t, err)
			setScaleStatus(tj, &jobsetv1alpha2.JobSet{ObjectMeta: metav1.ObjectMeta{Annotations: children.JobSet.Annotations}})
			assert.Equal(t, int32(3), tj.Status.Nodes)
			assert.Equal(t, tc.selector, tj.Status.Selector)
		})
	}
}

// TestANodeJobsRecordIsTheFrameworks: a TrainJob cannot name its own node jobs through its
// annotations (they would decide NODES and whose pods an autoscaler reads); a JobSet whose
// record does not parse counts its trainer job's pods.
func TestANodeJobsRecordIsTheFrameworks(t *testing.T) {
	spec := utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{}).Obj()
	rt := &trainingruntime.Runtime{Kind: trainer.ClusterTrainingRuntimeKind, Name: "torch", Spec: &spec}
	tj := utiltesting.MakeTrainJob("tj", "ns").RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch").NumNodes(2).Obj()
	tj.Spec.Annotations = map[string]string{framework.NodeJobsAnnotation: "dataset-initializer"}
	_, err := pipeline.Build(tj, rt, framework.Select(Frameworks(""), spec.MLPolicy))
	require.ErrorContains(t, err, "spec.annotations[trainer.kubeflow.org/node-jobs]: Forbidden: is set by the operator")
	// A runtime's template cannot either.
	tj.Spec.Annotations = nil
	spec.Template.Annotations = map[string]string{framework.NodeJobsAnnotation: "dataset-initializer"}
	children, err := pipeline.Build(tj, rt, framework.Select(Frameworks(""), spec.MLPolicy))
	require.NoError(t, err)
	assert.NotContains(t, children.JobSet.Annotations, framework.NodeJobsAnnotation, "the runtime named its node jobs")

	js := &jobsetv1alpha2.JobSet{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		framework.TrainingPodsAnnotation: "node=1x2", framework.TrainerJobAnnotation: "node", framework.NodeJobsAnnotation: "bad value!",
	}}}
	setScaleStatus(tj, js)
	assert.Equal(t, int32(2), tj.Status.Nodes)
	assert.Equal(t, "jobset.sigs.k8s.io/jobset-name=tj,jobset.sigs.k8s.io/replicatedjob-name=node", tj.Status.Selector)
}
