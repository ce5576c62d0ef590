package gang_test

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	schedulingv1alpha2 "k8s.io/api/scheduling/v1alpha2"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	schedulerpluginsv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
	"github.com/trainjob/operator/internal/framework/mpi"
	"github.com/trainjob/operator/internal/framework/plain"
	"github.com/trainjob/operator/internal/framework/torch"
	"github.com/trainjob/operator/internal/gang"
	"github.com/trainjob/operator/internal/pipeline"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/internal/trainingruntime"
)

func list(pairs ...string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i < len(pairs); i += 2 {
		l[corev1.ResourceName(pairs[i])] = resource.MustParse(pairs[i+1])
	}
	return l
}

// withResources gives a replicated job's first container requests and limits.
func withResources(job jobsetv1alpha2.ReplicatedJob, requests, limits corev1.ResourceList) jobsetv1alpha2.ReplicatedJob {
	job.Template.Spec.Template.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: requests, Limits: limits}
	return job
}

var coscheduling = trainer.PodGroupPolicySource{Coscheduling: &trainer.CoschedulingPodGroupPolicySource{ScheduleTimeoutSeconds: ptr.To[int32](120)}}

func mpiRuntime(launcherAsNode bool) *utiltesting.RuntimeSpecWrapper {
	launcher := withResources(utiltesting.ReplicatedJob("launcher", trainer.AncestorTrainer, "node"), list("cpu", "500m", "memory", "1Gi"), nil)
	node := withResources(utiltesting.ReplicatedJob("node", "", "node"), list("cpu", "2"), nil)
	return utiltesting.MakeRuntimeSpec().ReplicatedJobs(launcher, node).
		MPI(&trainer.MPIMLPolicySource{RunLauncherAsNode: ptr.To(launcherAsNode)})
}

func TestCoschedulingPodGroupSize(t *testing.T) {
	gpuNode := withResources(utiltesting.ReplicatedJob("node", trainer.AncestorTrainer, "node"),
		list("cpu", "2", "memory", "4Gi"), list("nvidia.com/gpu", "1"))
	cases := map[string]struct {
		runtime    *utiltesting.RuntimeSpecWrapper
		framework  framework.Framework
		trainJob   *trainer.TrainJob
		minMember  int32
		minRequest corev1.ResourceList
	}{
		"torch GPU nodes: every node, GPUs requested through their limits": {
			runtime:    utiltesting.MakeRuntimeSpec().NumNodes(3).ReplicatedJobs(gpuNode).Torch(&trainer.TorchMLPolicySource{}),
			framework:  torch.New(""),
			trainJob:   utiltesting.MakeTrainJob("tj", "ns").Obj(),
			minMember:  3,
			minRequest: list("cpu", "6", "memory", "12Gi", "nvidia.com/gpu", "3"),
		},
		"the TrainJob's numNodes and resourcesPerNode, merged into the runtime's resources, size the gang": {
			runtime:   utiltesting.MakeRuntimeSpec().NumNodes(3).ReplicatedJobs(gpuNode).Torch(&trainer.TorchMLPolicySource{}),
			framework: torch.New(""),
			trainJob: utiltesting.MakeTrainJob("tj", "ns").Trainer(&trainer.Trainer{
				NumNodes:         ptr.To[int32](5),
				ResourcesPerNode: &corev1.ResourceRequirements{Requests: list("cpu", "8"), Limits: list("nvidia.com/gpu", "2")},
			}).Obj(),
			minMember:  5,
			minRequest: list("cpu", "40", "memory", "20Gi", "nvidia.com/gpu", "10"),
		},
		"CPU-only nodes": {
			runtime: utiltesting.MakeRuntimeSpec().NumNodes(2).ReplicatedJobs(
				withResources(utiltesting.ReplicatedJob("node", trainer.AncestorTrainer, "node"), list("cpu", "500m", "memory", "256Mi"), nil)),
			framework:  plain.New(),
			trainJob:   utiltesting.MakeTrainJob("tj", "ns").Obj(),
			minMember:  2,
			minRequest: list("cpu", "1", "memory", "512Mi"),
		},
		"initializers finish before training, so they are not in the gang": {
			runtime: utiltesting.MakeRuntimeSpec().NumNodes(2).ReplicatedJobs(
				withResources(utiltesting.ReplicatedJob("dataset-initializer", trainer.AncestorDatasetInitializer, "dataset-initializer"), list("cpu", "4"), nil),
				withResources(utiltesting.ReplicatedJob("model-initializer", trainer.AncestorModelInitializer, "model-initializer"), list("cpu", "4"), nil),
				withResources(utiltesting.ReplicatedJob("node", trainer.AncestorTrainer, "node"), list("cpu", "1"), nil)),
			framework:  plain.New(),
			trainJob:   utiltesting.MakeTrainJob("tj", "ns").Obj(),
			minMember:  2,
			minRequest: list("cpu", "2"),
		},
		"an init container bigger than the containers sets the pod's request": {
			runtime: func() *utiltesting.RuntimeSpecWrapper {
				node := withResources(utiltesting.ReplicatedJob("node", trainer.AncestorTrainer, "node"), list("cpu", "1"), nil)
				node.Template.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: "fetch", Resources: corev1.ResourceRequirements{Requests: list("cpu", "3")}}}
				return utiltesting.MakeRuntimeSpec().NumNodes(2).ReplicatedJobs(node)
			}(),
			framework:  plain.New(),
			trainJob:   utiltesting.MakeTrainJob("tj", "ns").Obj(),
			minMember:  2,
			minRequest: list("cpu", "6"),
		},
		"MPI: the launcher and every node pod": {
			runtime:    mpiRuntime(false),
			framework:  mpi.New(),
			trainJob:   utiltesting.MakeTrainJob("tj", "ns").NumNodes(2).Obj(),
			minMember:  3,
			minRequest: list("cpu", "4500m", "memory", "1Gi"),
		},
		"MPI with the launcher as a node: the launcher and numNodes-1 node pods": {
			runtime:    mpiRuntime(true),
			framework:  mpi.New(),
			trainJob:   utiltesting.MakeTrainJob("tj", "ns").NumNodes(3).Obj(),
			minMember:  3,
			minRequest: list("cpu", "4500m", "memory", "1Gi"),
		},
		"MPI whose launcher waits for its nodes (the shipped runtime's shape): the node pods alone": {
			runtime: func() *utiltesting.RuntimeSpecWrapper {
				launcher := withResources(utiltesting.ReplicatedJob("launcher", trainer.AncestorTrainer, "node"), list("cpu", "500m", "memory", "1Gi"), nil)
				launcher.DependsOn = []jobsetv1alpha2.DependsOn{{Name: "node", Status: jobsetv1alpha2.DependencyReady}}
				node := withResources(utiltesting.ReplicatedJob("node", "", "node"), list("cpu", "2"), nil)
				return utiltesting.MakeRuntimeSpec().ReplicatedJobs(node, launcher).MPI(&trainer.MPIMLPolicySource{})
			}(),
			framework:  mpi.New(),
			trainJob:   utiltesting.MakeTrainJob("tj", "ns").NumNodes(2).Obj(),
			minMember:  2,
			minRequest: list("cpu", "4"),
		},
		"a trainer that waits for its initializers is still the gang": {
			runtime: func() *utiltesting.RuntimeSpecWrapper {
				dataset := withResources(utiltesting.ReplicatedJob("dataset-initializer", trainer.AncestorDatasetInitializer, "dataset-initializer"), list("cpu", "4"), nil)
				node := withResources(utiltesting.ReplicatedJob("node", trainer.AncestorTrainer, "node"), list("cpu", "1"), nil)
				node.DependsOn = []jobsetv1alpha2.DependsOn{{Name: "dataset-initializer", Status: jobsetv1alpha2.DependencyComplete}}
				return utiltesting.MakeRuntimeSpec().NumNodes(3).ReplicatedJobs(dataset, node)
			}(),
			framework:  plain.New(),
			trainJob:   utiltesting.MakeTrainJob("tj", "ns").Obj(),
			minMember:  3,
			minRequest: list("cpu", "3"),
		},
		"an elastic torch gang starts with minNodes, not maxNodes": {
			runtime: utiltesting.MakeRuntimeSpec().ReplicatedJobs(gpuNode).Torch(&trainer.TorchMLPolicySource{
				ElasticPolicy: &trainer.TorchElasticPolicy{MinNodes: ptr.To[int32](2), MaxNodes: ptr.To[int32](8)}}),
			framework:  torch.New(""),
			trainJob:   utiltesting.MakeTrainJob("tj", "ns").Obj(),
			minMember:  2,
			minRequest: list("cpu", "4", "memory", "8Gi", "nvidia.com/gpu", "2"),
		},
		"an elastic torch gang of a TrainJob with its own bounds starts with its own minNodes": {
			runtime: utiltesting.MakeRuntimeSpec().ReplicatedJobs(gpuNode).Torch(&trainer.TorchMLPolicySource{
				ElasticPolicy: &trainer.TorchElasticPolicy{MinNodes: ptr.To[int32](2), MaxNodes: ptr.To[int32](8)}}),
			framework: torch.New(""),
			trainJob: utiltesting.MakeTrainJob("tj", "ns").Trainer(&trainer.Trainer{
				ElasticPolicy: &trainer.TrainerElasticPolicy{MinNodes: ptr.To[int32](3), MaxNodes: ptr.To[int32](4)}}).Obj(),
			minMember:  3,
			minRequest: list("cpu", "6", "memory", "12Gi", "nvidia.com/gpu", "3"),
		},
		"replicas multiply the pods of a job": {
			runtime: func() *utiltesting.RuntimeSpecWrapper {
				node := withResources(utiltesting.ReplicatedJob("node", trainer.AncestorTrainer, "node"), list("cpu", "1"), nil)
				workers := withResources(utiltesting.ReplicatedJob("workers", "", "worker"), list("cpu", "1"), nil)
				workers.Replicas = 3
				workers.Template.Spec.Parallelism = ptr.To[int32](2)
				return utiltesting.MakeRuntimeSpec().ReplicatedJobs(node, workers)
			}(),
			framework:  plain.New(),
			trainJob:   utiltesting.MakeTrainJob("tj", "ns").Obj(),
			minMember:  7,
			minRequest: list("cpu", "7"),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			spec := tc.runtime.PodGroupPolicy(coscheduling).Obj()
			tc.trainJob.UID = "tj-uid"
			children := buildChildren(t, tc.trainJob, spec, tc.framework)
			got := utiltesting.FromApplyConfiguration[schedulerpluginsv1alpha1.PodGroup](t, children.PodGroup)
			want := &schedulerpluginsv1alpha1.PodGroup{
				TypeMeta: metav1.TypeMeta{APIVersion: "scheduling.x-k8s.io/v1alpha1", Kind: "PodGroup"},
				ObjectMeta: metav1.ObjectMeta{
					Name: "tj", Namespace: "ns",
					Labels:          map[string]string{trainer.TrainJobNameLabel: "tj"},
					Annotations:     map[string]string{framework.SpecHashAnnotation: framework.SpecHash(tc.trainJob, spec.MLPolicy)},
					OwnerReferences: []metav1.OwnerReference{framework.OwnerReference(tc.trainJob)},
				},
				Spec: schedulerpluginsv1alpha1.PodGroupSpec{
					MinMember:              tc.minMember,
					MinResources:           tc.minRequest,
					ScheduleTimeoutSeconds: ptr.To[int32](120),
				},
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("PodGroup (-want +got):\n%s", diff)
			}
		})
	}
}

// Upstream Kubeflow Trainer documents a coscheduling timeout of 0 as its default: the PodGroup gets
// 60 seconds, which scheduler-plugins would otherwise read as no wait at all.
func TestACoschedulingTimeoutOfZeroIsTheDefault(t *testing.T) {
	for timeout, want := range map[*int32]int32{ptr.To[int32](0): 60, nil: 60, ptr.To[int32](1): 1, ptr.To[int32](300): 300} {
		policy := trainer.PodGroupPolicySource{Coscheduling: &trainer.CoschedulingPodGroupPolicySource{ScheduleTimeoutSeconds: timeout}}
		spec := utiltesting.MakeRuntimeSpec().NumNodes(2).ReplicatedJobs(utiltesting.ReplicatedJob("node", trainer.AncestorTrainer, "node")).
			Torch(&trainer.TorchMLPolicySource{}).PodGroupPolicy(policy).Obj()
		children := buildChildren(t, utiltesting.MakeTrainJob("tj", "ns").Obj(), spec, torch.New(""))
		got := utiltesting.FromApplyConfiguration[schedulerpluginsv1alpha1.PodGroup](t, children.PodGroup)
		assert.Equal(t, ptr.To(want), got.Spec.ScheduleTimeoutSeconds, "scheduleTimeoutSeconds %v", ptr.Deref(timeout, -1))
	}
}

func buildChildren(t *testing.T, tj *trainer.TrainJob, spec trainer.TrainingRuntimeSpec, fw framework.Framework) *pipeline.Children {
	t.Helper()
	children, err := pipeline.Build(tj, &trainingruntime.Runtime{Kind: trainer.ClusterTrainingRuntimeKind, Name: "rt", Spec: &spec}, fw)
	require.NoError(t, err)
	return children
}

// podMetadata returns each replicated job's pod template labels and annotations.
func podMetadata(t *testing.T, children *pipeline.Children) (labels, annotations map[string]map[string]string) {
	js := utiltesting.FromApplyConfiguration[jobsetv1alpha2.JobSet](t, children.JobSet)
	labels, annotations = map[string]map[string]string{}, map[string]map[string]string{}
	for _, job := range js.Spec.ReplicatedJobs {
		labels[job.Name] = job.Template.Spec.Template.Labels
		annotations[job.Name] = job.Template.Spec.Template.Annotations
	}
	return labels, annotations
}

func TestGangMembership(t *testing.T) {
	runtime := func() *utiltesting.RuntimeSpecWrapper {
		return utiltesting.MakeRuntimeSpec().ReplicatedJobs(
			utiltesting.ReplicatedJob("dataset-initializer", trainer.AncestorDatasetInitializer, "dataset-initializer"),
			utiltesting.ReplicatedJob("node", trainer.AncestorTrainer, "node"))
	}
	tj := utiltesting.MakeTrainJob("tj", "ns").Obj()

	t.Run("coscheduling labels the member pods", func(t *testing.T) {
		children := buildChildren(t, tj, runtime().PodGroupPolicy(coscheduling).Obj(), plain.New())
		labels, _ := podMetadata(t, children)
		assert.Equal(t, "tj", labels["node"][gang.CoschedulingLabel])
		assert.NotContains(t, labels["dataset-initializer"], gang.CoschedulingLabel)
	})

	t.Run("volcano annotates the member pods and submits to the queue", func(t *testing.T) {
		children := buildChildren(t, tj, runtime().PodGroupPolicy(trainer.PodGroupPolicySource{
			Volcano: &trainer.VolcanoPodGroupPolicySource{Queue: ptr.To("research")},
		}).Obj(), plain.New())
		_, annotations := podMetadata(t, children)
		assert.Equal(t, map[string]string{gang.VolcanoAnnotation: "tj"}, annotations["node"])
		assert.Empty(t, annotations["dataset-initializer"])
		pg := utiltesting.FromApplyConfiguration[volcanov1beta1.PodGroup](t, children.PodGroup)
		assert.Equal(t, "scheduling.volcano.sh/v1beta1", pg.APIVersion)
		assert.Equal(t, "PodGroup", pg.Kind)
		assert.Equal(t, volcanov1beta1.PodGroupSpec{MinMember: 1, MinResources: &corev1.ResourceList{}, Queue: "research"}, pg.Spec)
		assert.Equal(t, map[string]string{trainer.TrainJobNameLabel: "tj"}, pg.Labels)
		assert.Len(t, pg.OwnerReferences, 1)
	})

	t.Run("kai labels the JobSet and every pod with the queue and needs no PodGroup", func(t *testing.T) {
		children := buildChildren(t, tj, runtime().PodGroupPolicy(trainer.PodGroupPolicySource{
			KAIScheduler: &trainer.KAISchedulerPodGroupPolicySource{Queue: "team-a"},
		}).Obj(), plain.New())
		labels, _ := podMetadata(t, children)
		assert.Equal(t, "team-a", labels["node"][gang.KAIQueueLabel])
		assert.Equal(t, "team-a", labels["dataset-initializer"][gang.KAIQueueLabel])
		assert.Equal(t, "team-a", children.JobSet.Labels[gang.KAIQueueLabel])
		assert.Nil(t, children.PodGroup)
		assert.Nil(t, children.Workload)
		js := utiltesting.FromApplyConfiguration[jobsetv1alpha2.JobSet](t, children.JobSet)
		assert.Len(t, js.OwnerReferences, 1, "KAI's pod-grouper follows a single controller owner chain")
	})

	t.Run("kubernetes' own gang names its PodGroup in each member pod's schedulingGroup, from a Workload", func(t *testing.T) {
		children := buildChildren(t, tj, runtime().NumNodes(3).PodGroupPolicy(trainer.PodGroupPolicySource{
			Workload: &trainer.WorkloadPodGroupPolicySource{},
		}).Obj(), plain.New())
		js := utiltesting.FromApplyConfiguration[jobsetv1alpha2.JobSet](t, children.JobSet)
		groups := map[string]*corev1.PodSchedulingGroup{}
		for _, job := range js.Spec.ReplicatedJobs {
			groups[job.Name] = job.Template.Spec.Template.Spec.SchedulingGroup
		}
		assert.Equal(t, map[string]*corev1.PodSchedulingGroup{"node": {PodGroupName: ptr.To("tj")}, "dataset-initializer": nil}, groups)
		gangOf3 := schedulingv1alpha2.PodGroupSchedulingPolicy{Gang: &schedulingv1alpha2.GangSchedulingPolicy{MinCount: 3}}
		pg := utiltesting.FromApplyConfiguration[schedulingv1alpha2.PodGroup](t, children.PodGroup)
		assert.Equal(t, "scheduling.k8s.io/v1alpha2", pg.APIVersion)
		assert.Equal(t, schedulingv1alpha2.PodGroupSpec{
			PodGroupTemplateRef: &schedulingv1alpha2.PodGroupTemplateReference{Workload: &schedulingv1alpha2.WorkloadPodGroupTemplateReference{
				WorkloadName: "tj", PodGroupTemplateName: gang.WorkloadTemplate}},
			SchedulingPolicy: gangOf3,
		}, pg.Spec)
		workload := utiltesting.FromApplyConfiguration[schedulingv1alpha2.Workload](t, children.Workload)
		assert.Equal(t, "Workload", workload.Kind)
		assert.Equal(t, []schedulingv1alpha2.PodGroupTemplate{{Name: gang.WorkloadTemplate, SchedulingPolicy: gangOf3}}, workload.Spec.PodGroupTemplates)
		assert.Equal(t, &schedulingv1alpha2.TypedLocalObjectReference{APIGroup: trainer.GroupVersion.Group, Kind: trainer.TrainJobKind, Name: "tj"},
			workload.Spec.ControllerRef)
		for _, obj := range []metav1.Object{pg, workload} {
			assert.Equal(t, map[string]string{trainer.TrainJobNameLabel: "tj"}, obj.GetLabels())
			assert.Len(t, obj.GetOwnerReferences(), 1)
		}
		assert.True(t, gang.Immutable(&schedulingv1alpha2.PodGroup{}), "Kubernetes' own PodGroup cannot change")
	})

	t.Run("kubernetes' own gang of no pod still has a minCount of 1, which Kubernetes requires", func(t *testing.T) {
		// DeepSpeed's shipped shape at one node: the launcher runs as the node and waits for a node
		// job of no pod, so no pod is in the gang.
		rt := mpiRuntime(true).NumNodes(1).PodGroupPolicy(trainer.PodGroupPolicySource{Workload: &trainer.WorkloadPodGroupPolicySource{}}).Obj()
		jobs := rt.Template.Spec.ReplicatedJobs
		launcher, node := jobs[0], jobs[1]
		launcher.DependsOn = []jobsetv1alpha2.DependsOn{{Name: "node", Status: jobsetv1alpha2.DependencyReady}}
		rt.Template.Spec.ReplicatedJobs = []jobsetv1alpha2.ReplicatedJob{node, launcher}
		children := buildChildren(t, utiltesting.MakeTrainJob("tj", "ns").Obj(), rt, mpi.New())
		pg := utiltesting.FromApplyConfiguration[schedulingv1alpha2.PodGroup](t, children.PodGroup)
		workload := utiltesting.FromApplyConfiguration[schedulingv1alpha2.Workload](t, children.Workload)
		assert.Equal(t, int32(1), pg.Spec.SchedulingPolicy.Gang.MinCount)
		assert.Equal(t, int32(1), workload.Spec.PodGroupTemplates[0].SchedulingPolicy.Gang.MinCount)
		js := utiltesting.FromApplyConfiguration[jobsetv1alpha2.JobSet](t, children.JobSet)
		assert.Equal(t, "launcher", js.Spec.ReplicatedJobs[1].Name)
		assert.Nil(t, js.Spec.ReplicatedJobs[1].Template.Spec.Template.Spec.SchedulingGroup, "the launcher, which waits for its nodes, is in the gang")
	})

	t.Run("without a gang policy nothing is stamped", func(t *testing.T) {
		children := buildChildren(t, tj, runtime().Obj(), plain.New())
		labels, _ := podMetadata(t, children)
		assert.Equal(t, map[string]string{trainer.AncestorStepLabel: trainer.AncestorTrainer}, labels["node"])
		assert.Nil(t, children.PodGroup)
	})

	t.Run("a TrainJob may not name a gang or a queue itself", func(t *testing.T) {
		for _, meta := range []trainer.MetadataPatch{
			{Labels: map[string]string{gang.CoschedulingLabel: "other"}},
			{Annotations: map[string]string{gang.VolcanoAnnotation: "other"}},
			{Labels: map[string]string{gang.KAIQueueLabel: "another-teams-queue"}},
		} {
			sneaky := tj.DeepCopy()
			sneaky.Spec.Labels, sneaky.Spec.Annotations = meta.Labels, meta.Annotations
			_, err := pipeline.Build(sneaky, &trainingruntime.Runtime{Kind: trainer.ClusterTrainingRuntimeKind, Name: "rt", Spec: ptr.To(runtime().PodGroupPolicy(coscheduling).Obj())}, plain.New())
			assert.ErrorContains(t, err, "may not be set by hand", "%v", meta)
		}
	})
}

func TestVolcanoPodGroupSpec(t *testing.T) {
	node := func(priority string) jobsetv1alpha2.ReplicatedJob {
		job := withResources(utiltesting.ReplicatedJob("node", trainer.AncestorTrainer, "node"), list("cpu", "1"), nil)
		job.Template.Spec.Template.Spec.PriorityClassName = priority
		return job
	}
	// launcher is a second member job, the first in the JobSet.
	launcher := func(priority string) jobsetv1alpha2.ReplicatedJob {
		job := withResources(utiltesting.ReplicatedJob("launcher", "", "launcher"), list("cpu", "1"), nil)
		job.Template.Spec.Template.Spec.PriorityClassName = priority
		return job
	}
	volcano := func(p trainer.VolcanoPodGroupPolicySource) trainer.PodGroupPolicySource {
		return trainer.PodGroupPolicySource{Volcano: &p}
	}
	queueAnnotation := func(queue string) map[string]string {
		return map[string]string{volcanov1beta1.QueueNameAnnotationKey: queue}
	}
	tj := func() *utiltesting.TrainJobWrapper { return utiltesting.MakeTrainJob("tj", "ns") }
	cases := map[string]struct {
		runtime *utiltesting.RuntimeSpecWrapper
		// runtimeAnnotations are the runtime's JobSet template annotations.
		runtimeAnnotations map[string]string
		trainJob           *trainer.TrainJob
		want               volcanov1beta1.PodGroupSpec
		wantErr            string
	}{
		"the runtime's queue": {
			runtime:  utiltesting.MakeRuntimeSpec().ReplicatedJobs(node("")).PodGroupPolicy(volcano(trainer.VolcanoPodGroupPolicySource{Queue: ptr.To("research")})),
			trainJob: tj().Obj(),
			want:     volcanov1beta1.PodGroupSpec{MinMember: 1, Queue: "research"},
		},
		"no queue anywhere is Volcano's default queue": {
			runtime:  utiltesting.MakeRuntimeSpec().ReplicatedJobs(node("")).PodGroupPolicy(volcano(trainer.VolcanoPodGroupPolicySource{})),
			trainJob: tj().Obj(),
			want:     volcanov1beta1.PodGroupSpec{MinMember: 1},
		},
		"the runtime's queue field binds: no annotation moves its TrainJobs to another queue": {
			runtime:            utiltesting.MakeRuntimeSpec().ReplicatedJobs(node("")).PodGroupPolicy(volcano(trainer.VolcanoPodGroupPolicySource{Queue: ptr.To("research")})),
			runtimeAnnotations: queueAnnotation("batch"),
			trainJob: func() *trainer.TrainJob {
				o := tj().Obj()
				o.Spec.Annotations = queueAnnotation("urgent")
				return o
			}(),
			want: volcanov1beta1.PodGroupSpec{MinMember: 1, Queue: "research"},
		},
		"without a queue field, the queue annotation of the runtime's template": {
			runtime:            utiltesting.MakeRuntimeSpec().ReplicatedJobs(node("")).PodGroupPolicy(volcano(trainer.VolcanoPodGroupPolicySource{})),
			runtimeAnnotations: queueAnnotation("batch"),
			trainJob:           tj().Obj(),
			want:               volcanov1beta1.PodGroupSpec{MinMember: 1, Queue: "batch"},
		},
		"without a queue field, a TrainJob chooses its queue with the annotation in spec.annotations": {
			runtime:            utiltesting.MakeRuntimeSpec().ReplicatedJobs(node("")).PodGroupPolicy(volcano(trainer.VolcanoPodGroupPolicySource{})),
			runtimeAnnotations: queueAnnotation("batch"),
			trainJob: func() *trainer.TrainJob {
				o := tj().Obj()
				o.Spec.Annotations = queueAnnotation("urgent")
				return o
			}(),
			want: volcanov1beta1.PodGroupSpec{MinMember: 1, Queue: "urgent"},
		},
		"a runtime patch's queue annotation wins over the TrainJob's": {
			runtime: utiltesting.MakeRuntimeSpec().ReplicatedJobs(node("")).PodGroupPolicy(volcano(trainer.VolcanoPodGroupPolicySource{})),
			trainJob: func() *trainer.TrainJob {
				o := tj().RuntimePatches(trainer.RuntimePatch{Manager: "kueue", TrainingRuntimeSpec: &trainer.TrainingRuntimeSpecPatch{
					Template: &trainer.JobSetTemplatePatch{Metadata: &trainer.MetadataPatch{Annotations: queueAnnotation("from-patch")}},
				}}).Obj()
				o.Spec.Annotations = queueAnnotation("urgent")
				return o
			}(),
			want: volcanov1beta1.PodGroupSpec{MinMember: 1, Queue: "from-patch"},
		},
		"an empty queue annotation leaves the runtime's queue": {
			runtime: utiltesting.MakeRuntimeSpec().ReplicatedJobs(node("")).PodGroupPolicy(volcano(trainer.VolcanoPodGroupPolicySource{Queue: ptr.To("research")})),
			trainJob: func() *trainer.TrainJob {
				o := tj().Obj()
				o.Spec.Annotations = queueAnnotation("")
				return o
			}(),
			want: volcanov1beta1.PodGroupSpec{MinMember: 1, Queue: "research"},
		},
		"network topology is passed on as the runtime has it": {
			runtime: utiltesting.MakeRuntimeSpec().ReplicatedJobs(node("")).PodGroupPolicy(volcano(trainer.VolcanoPodGroupPolicySource{
				NetworkTopology: &volcanov1beta1.NetworkTopologySpec{Mode: volcanov1beta1.SoftNetworkTopologyMode, HighestTierAllowed: ptr.To(2)},
			})),
			trainJob: tj().Obj(),
			want: volcanov1beta1.PodGroupSpec{MinMember: 1, NetworkTopology: &volcanov1beta1.NetworkTopologySpec{
				Mode: volcanov1beta1.SoftNetworkTopologyMode, HighestTierAllowed: ptr.To(2),
			}},
		},
		"an empty network topology is left to Volcano's defaults": {
			runtime: utiltesting.MakeRuntimeSpec().ReplicatedJobs(node("")).PodGroupPolicy(volcano(trainer.VolcanoPodGroupPolicySource{
				NetworkTopology: &volcanov1beta1.NetworkTopologySpec{},
			})),
			trainJob: tj().Obj(),
			want:     volcanov1beta1.PodGroupSpec{MinMember: 1, NetworkTopology: &volcanov1beta1.NetworkTopologySpec{}},
		},
		"the priority class of the member pods": {
			runtime:  utiltesting.MakeRuntimeSpec().ReplicatedJobs(launcher("high"), node("high")).PodGroupPolicy(volcano(trainer.VolcanoPodGroupPolicySource{})),
			trainJob: tj().Obj(),
			want:     volcanov1beta1.PodGroupSpec{MinMember: 2, PriorityClassName: "high"},
		},
		"a member without a priority class is left out": {
			runtime:  utiltesting.MakeRuntimeSpec().ReplicatedJobs(launcher(""), node("high")).PodGroupPolicy(volcano(trainer.VolcanoPodGroupPolicySource{})),
			trainJob: tj().Obj(),
			want:     volcanov1beta1.PodGroupSpec{MinMember: 2, PriorityClassName: "high"},
		},
		"an initializer's priority class is not the gang's": {
			runtime: func() *utiltesting.RuntimeSpecWrapper {
				dataset := utiltesting.ReplicatedJob("dataset-initializer", trainer.AncestorDatasetInitializer, "dataset-initializer")
				dataset.Template.Spec.Template.Spec.PriorityClassName = "low"
				return utiltesting.MakeRuntimeSpec().ReplicatedJobs(dataset, node("high")).PodGroupPolicy(volcano(trainer.VolcanoPodGroupPolicySource{}))
			}(),
			trainJob: tj().Obj(),
			want:     volcanov1beta1.PodGroupSpec{MinMember: 1, PriorityClassName: "high"},
		},
		"members of different priority classes cannot be built": {
			runtime:  utiltesting.MakeRuntimeSpec().ReplicatedJobs(launcher("low"), node("high")).PodGroupPolicy(volcano(trainer.VolcanoPodGroupPolicySource{})),
			trainJob: tj().Obj(),
			wantErr: `ClusterTrainingRuntime "rt": spec.template.spec.replicatedJobs[1].template.spec.template.spec.priorityClassName: Invalid value: "high": ` +
				`replicated job "node" names priority class "high" and replicated job "launcher" names "low": the jobs of a gang must name the same one`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			spec := tc.runtime.Obj()
			spec.Template.Annotations = tc.runtimeAnnotations
			children, err := pipeline.Build(tc.trainJob, &trainingruntime.Runtime{Kind: trainer.ClusterTrainingRuntimeKind, Name: "rt", Spec: &spec}, plain.New())
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			got := utiltesting.FromApplyConfiguration[volcanov1beta1.PodGroup](t, children.PodGroup)
			tc.want.MinResources = &corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(fmt.Sprint(tc.want.MinMember))}
			if diff := cmp.Diff(tc.want, got.Spec); diff != "" {
				t.Errorf("PodGroup spec (-want +got):\n%s", diff)
			}
		})
	}
}
