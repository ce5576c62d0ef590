package pipeline

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
	"github.com/trainjob/operator/internal/framework/plain"
	"github.com/trainjob/operator/internal/progress"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/internal/trainingruntime"
	"github.com/trainjob/operator/internal/upsert"
)

// A runtime with a dataset initializer, a model initializer and a trainer job whose pod also runs
// a sidecar and an init container.
func fullRuntime() *utiltesting.RuntimeSpecWrapper {
	node := utiltesting.ReplicatedJob("node", trainer.AncestorTrainer, "node")
	pod := &node.Template.Spec.Template.Spec
	pod.Containers[0].Env = []corev1.EnvVar{{Name: "A", Value: "runtime"}, {Name: "B", Value: "runtime"}}
	pod.Containers = append(pod.Containers, corev1.Container{Name: "sidecar", Image: "proxy"})
	pod.InitContainers = []corev1.Container{{Name: "fetch", Image: "busybox"}}
	dataset := utiltesting.ReplicatedJob("dataset-initializer", trainer.AncestorDatasetInitializer, "dataset-initializer")
	dataset.Template.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: StorageURIEnv, Value: "hf://default"}}
	model := utiltesting.ReplicatedJob("model-initializer", trainer.AncestorModelInitializer, "model-initializer")
	return utiltesting.MakeRuntimeSpec().ReplicatedJobs(dataset, model, node)
}

// stubFramework sets FRAMEWORK_VAR on the trainer container, or fails.
type stubFramework struct{ err error }

func (stubFramework) Name() string                   { return "stub" }
func (stubFramework) Selects(*trainer.MLPolicy) bool { return true }
func (stubFramework) ReservedEnv() []string          { return []string{"FRAMEWORK_VAR"} }
func (f stubFramework) Apply(b *framework.Draft) error {
	if f.err != nil {
		return f.err
	}
	c := b.TrainerContainer()
	c.Env = upsert.Env(c.Env, corev1.EnvVar{Name: "FRAMEWORK_VAR", Value: "framework"})
	return nil
}

func TestJobSet(t *testing.T) {
	tj := func() *utiltesting.TrainJobWrapper { return utiltesting.MakeTrainJob("tj", "ns").UID("tj-uid") }
	env := func(pairs ...string) []corev1.EnvVar {
		var vars []corev1.EnvVar
		for i := 0; i < len(pairs); i += 2 {
			vars = append(vars, corev1.EnvVar{Name: pairs[i], Value: pairs[i+1]})
		}
		return vars
	}
	gpu := corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}}
	secretEnv := corev1.EnvVar{Name: "A", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "k"}}}
	trainerAndSidecar := func() trainer.TrainingRuntimeSpec {
		node := utiltesting.ReplicatedJob("node", trainer.AncestorTrainer, "trainer")
		node.Template.Spec.Template.Spec.Containers = append(node.Template.Spec.Template.Spec.Containers,
			corev1.Container{Name: "node", Image: "real-trainer"})
		return utiltesting.MakeRuntimeSpec().ReplicatedJobs(node).Obj()
	}()

	cases := map[string]struct {
		runtime   trainer.TrainingRuntimeSpec
		trainJob  *trainer.TrainJob
		framework framework.Framework
		// want is the expected JobSet, built from runtime and trainJob.
		want    func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet
		wantErr string
	}{
		"a TrainJob with no values runs the runtime's template on one node": {
			runtime:  utiltesting.MakeRuntimeSpec().Obj(),
			trainJob: tj().Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return utiltesting.MakeJobSet(tj, rt).Obj()
			},
		},
		"trainer image, command and args replace the runtime's": {
			runtime: utiltesting.MakeRuntimeSpec().Obj(),
			trainJob: tj().Trainer(&trainer.Trainer{
				Image: ptr.To("pytorch:2"), Command: []string{"torchrun"}, Args: []string{"train.py", "--lr=0.1"},
			}).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return utiltesting.MakeJobSet(tj, rt).Container("node", "node", func(c *corev1.Container) {
					c.Image, c.Command, c.Args = "pytorch:2", []string{"torchrun"}, []string{"train.py", "--lr=0.1"}
				}).Obj()
			},
		},
		"trainer env is merged by name and the TrainJob wins": {
			runtime:  fullRuntime().Obj(),
			trainJob: tj().Trainer(&trainer.Trainer{Env: env("A", "job", "C", "job")}).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return utiltesting.MakeJobSet(tj, rt).Container("node", "node", func(c *corev1.Container) {
					c.Env = env("A", "job", "B", "runtime", "C", "job")
				}).Obj()
			},
		},
		"a trainer env var from a secret replaces the runtime's plain value whole": {
			runtime:  fullRuntime().Obj(),
			trainJob: tj().Trainer(&trainer.Trainer{Env: []corev1.EnvVar{secretEnv}}).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return utiltesting.MakeJobSet(tj, rt).Container("node", "node", func(c *corev1.Container) {
					c.Env = []corev1.EnvVar{secretEnv, {Name: "B", Value: "runtime"}}
				}).Obj()
			},
		},
		"resourcesPerNode merges into the trainer container's resources: a GPU keeps the runtime's CPU and memory": {
			runtime:  withNodeResources("2", "4", "8Gi"),
			trainJob: tj().Trainer(&trainer.Trainer{ResourcesPerNode: &gpu}).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return utiltesting.MakeJobSet(tj, rt).Container("node", "node", func(c *corev1.Container) {
					c.Resources = corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("8Gi")},
						Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"),
							"nvidia.com/gpu": resource.MustParse("2")},
					}
				}).Obj()
			},
		},
		"resourcesPerNode wins for the resources it names": {
			runtime: withNodeResources("2", "4", "8Gi"),
			trainJob: tj().Trainer(&trainer.Trainer{ResourcesPerNode: &corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")},
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")},
			}}).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return utiltesting.MakeJobSet(tj, rt).Container("node", "node", func(c *corev1.Container) {
					c.Resources = corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3"), corev1.ResourceMemory: resource.MustParse("8Gi")},
						Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3"), corev1.ResourceMemory: resource.MustParse("8Gi")},
					}
				}).Obj()
			},
		},
		"a resourcesPerNode limit below the runtime's request is refused, not left for every pod to fail": {
			runtime: withNodeResources("2", "4", "8Gi"),
			trainJob: tj().Trainer(&trainer.Trainer{ResourcesPerNode: &corev1.ResourceRequirements{
				Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
			}}).Obj(),
			wantErr: `spec.trainer.resourcesPerNode.limits[cpu]: Invalid value: "1": the cpu request of container "node" (2) would be above its limit (1), merged with the runtime's resources: set both the request and the limit`,
		},
		"the runtime's numNodes sizes the trainer job": {
			runtime:  utiltesting.MakeRuntimeSpec().NumNodes(3).Obj(),
			trainJob: tj().Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return utiltesting.MakeJobSet(tj, rt).NumNodes("node", 3).Obj()
			},
		},
		"the TrainJob's numNodes overrides the runtime's": {
			runtime:  utiltesting.MakeRuntimeSpec().NumNodes(3).Obj(),
			trainJob: tj().NumNodes(5).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return utiltesting.MakeJobSet(tj, rt).NumNodes("node", 5).Obj()
			},
		},
		"numNodes sizes only the trainer job, not the initializers": {
			runtime:  fullRuntime().Obj(),
			trainJob: tj().NumNodes(4).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return utiltesting.MakeJobSet(tj, rt).NumNodes("node", 4).Obj()
			},
		},
		"the trainer container may be named trainer": {
			runtime:  utiltesting.MakeRuntimeSpec().ReplicatedJobs(utiltesting.ReplicatedJob("worker", trainer.AncestorTrainer, "trainer")).Obj(),
			trainJob: tj().Trainer(&trainer.Trainer{Image: ptr.To("img")}).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return utiltesting.MakeJobSet(tj, rt).Container("worker", "trainer", func(c *corev1.Container) { c.Image = "img" }).Obj()
			},
		},
		"a container named node is the trainer even when one is named trainer": {
			runtime:  trainerAndSidecar,
			trainJob: tj().Trainer(&trainer.Trainer{Image: ptr.To("img")}).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return utiltesting.MakeJobSet(tj, rt).Container("node", "node", func(c *corev1.Container) { c.Image = "img" }).Obj()
			},
		},
		"trainer values leave the sidecar, the init container and other jobs alone": {
			runtime:  fullRuntime().Obj(),
			trainJob: tj().Trainer(&trainer.Trainer{Image: ptr.To("img"), Env: env("X", "1")}).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return utiltesting.MakeJobSet(tj, rt).Container("node", "node", func(c *corev1.Container) {
					c.Image = "img"
					c.Env = append(c.Env, env("X", "1")...)
				}).Obj()
			},
		},
		"a runtime without a trainer job cannot be built": {
			runtime:  utiltesting.MakeRuntimeSpec().ReplicatedJobs(utiltesting.ReplicatedJob("node", "", "node")).Obj(),
			trainJob: tj().Obj(),
			wantErr:  `TrainingRuntime "rt": spec.template.spec.replicatedJobs: Required value: the Job template or pod template of one replicated job must be labelled trainer.kubeflow.org/trainjob-ancestor-step=trainer: that job runs the trainer`,
		},
		"a runtime with two trainer jobs cannot be built": {
			runtime: utiltesting.MakeRuntimeSpec().ReplicatedJobs(
				utiltesting.ReplicatedJob("a", trainer.AncestorTrainer, "node"),
				utiltesting.ReplicatedJob("b", trainer.AncestorTrainer, "node")).Obj(),
			trainJob: tj().Obj(),
			wantErr:  `TrainingRuntime "rt": spec.template.spec.replicatedJobs[1].template.spec.template.metadata.labels: Invalid value: "trainer.kubeflow.org/trainjob-ancestor-step=trainer": only one replicated job may run the trainer`,
		},
		"a trainer job without a node or trainer container cannot be built": {
			runtime:  utiltesting.MakeRuntimeSpec().ReplicatedJobs(utiltesting.ReplicatedJob("node", trainer.AncestorTrainer, "main")).Obj(),
			trainJob: tj().Obj(),
			wantErr:  `TrainingRuntime "rt": spec.template.spec.replicatedJobs[0].template.spec.template.spec.containers: Required value: the trainer job "node" needs a container named "node" or "trainer"`,
		},
		"the dataset initializer gets STORAGE_URI, env and the secret": {
			runtime: fullRuntime().Obj(),
			trainJob: tj().Initializer(&trainer.Initializer{Dataset: &trainer.DatasetInitializer{
				StorageUri: ptr.To("s3://bucket/data"), Env: env("ENDPOINT", "minio"),
				SecretRef: &corev1.LocalObjectReference{Name: "s3-creds"},
			}}).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return utiltesting.MakeJobSet(tj, rt).Container("dataset-initializer", "dataset-initializer", func(c *corev1.Container) {
					c.Env = env(StorageURIEnv, "s3://bucket/data", "ENDPOINT", "minio")
					c.EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "s3-creds"}}}}
				}).Obj()
			},
		},
		"the model initializer without a secret gets no envFrom": {
			runtime:  fullRuntime().Obj(),
			trainJob: tj().Initializer(&trainer.Initializer{Model: &trainer.ModelInitializer{StorageUri: ptr.To("hf://org/model")}}).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return utiltesting.MakeJobSet(tj, rt).Container("model-initializer", "model-initializer", func(c *corev1.Container) {
					c.Env = env(StorageURIEnv, "hf://org/model")
				}).Obj()
			},
		},
		"the TrainJob's storageUri replaces the runtime's STORAGE_URI": {
			runtime:  fullRuntime().Obj(),
			trainJob: tj().Initializer(&trainer.Initializer{Dataset: &trainer.DatasetInitializer{StorageUri: ptr.To("hf://mine")}}).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return utiltesting.MakeJobSet(tj, rt).Container("dataset-initializer", "dataset-initializer", func(c *corev1.Container) {
					c.Env = env(StorageURIEnv, "hf://mine")
				}).Obj()
			},
		},
		"without spec.initializer the initializer jobs run as the runtime says": {
			runtime:  fullRuntime().Obj(),
			trainJob: tj().Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return utiltesting.MakeJobSet(tj, rt).Obj()
			},
		},
		"a dataset initializer for a runtime without one cannot be built": {
			runtime:  utiltesting.MakeRuntimeSpec().Obj(),
			trainJob: tj().Initializer(&trainer.Initializer{Dataset: &trainer.DatasetInitializer{StorageUri: ptr.To("hf://d")}}).Obj(),
			wantErr:  `spec.initializer.dataset: Forbidden: TrainingRuntime "rt" has no dataset-initializer: no replicated job is labelled trainer.kubeflow.org/trainjob-ancestor-step=dataset-initializer`,
		},
		"an initializer job without the initializer container cannot be built": {
			runtime: utiltesting.MakeRuntimeSpec().ReplicatedJobs(
				utiltesting.ReplicatedJob("init", trainer.AncestorModelInitializer, "download"),
				utiltesting.ReplicatedJob("node", trainer.AncestorTrainer, "node")).Obj(),
			trainJob: tj().Initializer(&trainer.Initializer{Model: &trainer.ModelInitializer{StorageUri: ptr.To("hf://m")}}).Obj(),
			wantErr:  `TrainingRuntime "rt": spec.template.spec.replicatedJobs[0].template.spec.template.spec.containers: Required value: the model-initializer job "init" needs a container named "model-initializer"`,
		},
		"an override without targetJobs applies to every job": {
			runtime:  fullRuntime().Obj(),
			trainJob: tj().PodSpecOverrides(trainer.PodSpecOverride{PodSpecPatch: trainer.PodSpecPatch{ServiceAccountName: ptr.To("team-a")}}).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				w := utiltesting.MakeJobSet(tj, rt)
				for _, job := range []string{"dataset-initializer", "model-initializer", "node"} {
					w.PodSpec(job, func(s *corev1.PodSpec) { s.ServiceAccountName = "team-a" })
				}
				return w.Obj()
			},
		},
		"an override with targetJobs applies only to them": {
			runtime:  fullRuntime().Obj(),
			trainJob: tj().PodSpecOverrides(trainer.PodSpecOverride{TargetJobs: []string{"node"}, PodSpecPatch: trainer.PodSpecPatch{ServiceAccountName: ptr.To("team-a")}}).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return utiltesting.MakeJobSet(tj, rt).PodSpec("node", func(s *corev1.PodSpec) { s.ServiceAccountName = "team-a" }).Obj()
			},
		},
		"an override of a job the runtime lacks cannot be built": {
			runtime: fullRuntime().Obj(),
			trainJob: tj().PodSpecOverrides(trainer.PodSpecOverride{}, trainer.PodSpecOverride{
				TargetJobs: []string{"node", "launcher"},
			}).Obj(),
			wantErr: `spec.podSpecOverrides[1].targetJobs[1]: Invalid value: "launcher": TrainingRuntime "rt" has no replicated job of that name`,
		},
		"an override of a container the job lacks cannot be built": {
			runtime:  fullRuntime().Obj(),
			trainJob: tj().PodSpecOverrides(trainer.PodSpecOverride{TargetJobs: []string{"node"}, PodSpecPatch: trainer.PodSpecPatch{Containers: []trainer.ContainerPatch{{Name: "node"}, {Name: "proxy"}}}}).Obj(),
			wantErr:  `spec.podSpecOverrides[0].containers[1].name: Invalid value: "proxy": replicated job "node" of TrainingRuntime "rt" has no container of that name`,
		},
		"an override of an init container the job lacks cannot be built": {
			runtime:  fullRuntime().Obj(),
			trainJob: tj().PodSpecOverrides(trainer.PodSpecOverride{TargetJobs: []string{"dataset-initializer"}, PodSpecPatch: trainer.PodSpecPatch{InitContainers: []trainer.ContainerPatch{{Name: "fetch"}}}}).Obj(),
			wantErr:  `spec.podSpecOverrides[0].initContainers[0].name: Invalid value: "fetch": replicated job "dataset-initializer" of TrainingRuntime "rt" has no init container of that name`,
		},
		"override env wins over the trainer's": {
			runtime:   fullRuntime().Obj(),
			framework: stubFramework{},
			trainJob:  tj().Trainer(&trainer.Trainer{Env: env("A", "trainer")}).PodSpecOverrides(trainer.PodSpecOverride{TargetJobs: []string{"node"}, PodSpecPatch: trainer.PodSpecPatch{Containers: []trainer.ContainerPatch{{Name: "node", Env: env("A", "override")}}}}).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return utiltesting.MakeJobSet(tj, rt).Container("node", "node", func(c *corev1.Container) {
					c.Env = env("A", "override", "B", "runtime", "FRAMEWORK_VAR", "framework")
				}).Obj()
			},
		},
		"a TrainJob is told every error of a step at once": {
			runtime:   fullRuntime().Obj(),
			framework: stubFramework{},
			trainJob: tj().Trainer(&trainer.Trainer{Env: env("FRAMEWORK_VAR", "mine")}).PodSpecOverrides(
				trainer.PodSpecOverride{TargetJobs: []string{"launcher"}},
				trainer.PodSpecOverride{TargetJobs: []string{"node", "worker"}}).Obj(),
			wantErr: `[spec.trainer.env[0].name: Forbidden: FRAMEWORK_VAR is set by the stub framework and may not be set by hand, ` +
				`spec.podSpecOverrides[0].targetJobs[0]: Invalid value: "launcher": TrainingRuntime "rt" has no replicated job of that name, ` +
				`spec.podSpecOverrides[1].targetJobs[1]: Invalid value: "worker": TrainingRuntime "rt" has no replicated job of that name]`,
		},
		"a TrainJob that sets the framework's env var cannot be built": {
			runtime:   fullRuntime().Obj(),
			framework: stubFramework{},
			trainJob:  tj().Trainer(&trainer.Trainer{Env: env("EPOCHS", "3", "FRAMEWORK_VAR", "mine")}).Obj(),
			wantErr:   "spec.trainer.env[1].name: Forbidden: FRAMEWORK_VAR is set by the stub framework and may not be set by hand",
		},
		"an override that sets the framework's env var on the trainer container cannot be built": {
			runtime:   fullRuntime().Obj(),
			framework: stubFramework{},
			trainJob:  tj().PodSpecOverrides(trainer.PodSpecOverride{PodSpecPatch: trainer.PodSpecPatch{Containers: []trainer.ContainerPatch{{Name: "node", Env: env("A", "x", "FRAMEWORK_VAR", "mine")}}}}).Obj(),
			wantErr:   "spec.podSpecOverrides[0].containers[0].env[1].name: Forbidden: FRAMEWORK_VAR is set by the stub framework and may not be set by hand",
		},
		"an override may set the framework's env var name on a sidecar": {
			runtime:   fullRuntime().Obj(),
			framework: stubFramework{},
			trainJob:  tj().PodSpecOverrides(trainer.PodSpecOverride{TargetJobs: []string{"node"}, PodSpecPatch: trainer.PodSpecPatch{Containers: []trainer.ContainerPatch{{Name: "sidecar", Env: env("FRAMEWORK_VAR", "proxy")}}}}).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return utiltesting.MakeJobSet(tj, rt).
					Container("node", "node", func(c *corev1.Container) { c.Env = append(c.Env, env("FRAMEWORK_VAR", "framework")...) }).
					Container("node", "sidecar", func(c *corev1.Container) { c.Env = env("FRAMEWORK_VAR", "proxy") }).Obj()
			},
		},
		"a runtime that sets the framework's env var cannot be built": {
			runtime: func() trainer.TrainingRuntimeSpec {
				rt := fullRuntime().Obj()
				c := &rt.Template.Spec.ReplicatedJobs[2].Template.Spec.Template.Spec.Containers[0]
				c.Env = append(c.Env, env("FRAMEWORK_VAR", "runtime")...)
				return rt
			}(),
			framework: stubFramework{},
			trainJob:  tj().Obj(),
			wantErr:   `TrainingRuntime "rt": spec.template.spec.replicatedJobs[2].template.spec.template.spec.containers[0].env[2].name: Forbidden: FRAMEWORK_VAR is set by the stub framework and may not be set by hand`,
		},
		"a framework that fails fails the build": {
			runtime:   fullRuntime().Obj(),
			framework: stubFramework{err: errors.New("numProcPerNode does not fit")},
			trainJob:  tj().Obj(),
			wantErr:   "numProcPerNode does not fit",
		},
		"an initializer env entry cannot overwrite storageUri": {
			runtime: fullRuntime().Obj(),
			trainJob: tj().Initializer(&trainer.Initializer{Dataset: &trainer.DatasetInitializer{
				StorageUri: ptr.To("hf://org/data"), Env: []corev1.EnvVar{{Name: "TOKEN", Value: "t"}, {Name: StorageURIEnv, Value: "s3://other"}},
			}}).Obj(),
			wantErr: "spec.initializer.dataset.env[1].name: Forbidden: STORAGE_URI is set from spec.initializer.dataset.storageUri: set one or the other",
		},
		"a trainer job of several replicas is refused: ranks would repeat": {
			runtime: func() trainer.TrainingRuntimeSpec {
				rt := utiltesting.MakeRuntimeSpec().Obj()
				rt.Template.Spec.ReplicatedJobs[0].Replicas = 2
				return rt
			}(),
			trainJob: tj().Obj(),
			wantErr:  `TrainingRuntime "rt": spec.template.spec.replicatedJobs[0].replicas: Invalid value: 2: the trainer job must have 1 replica`,
		},
		"pods whose names would exceed 63 characters are refused, with the length the name may have": {
			runtime:  utiltesting.MakeRuntimeSpec().Obj(),
			trainJob: utiltesting.MakeTrainJob(strings.Repeat("a", 48), "ns").NumNodes(16).Obj(),
			wantErr: `metadata.name: Invalid value: "` + strings.Repeat("a", 48) + `": the pods of replicated job "node" would get names of 64 characters (such as "` +
				strings.Repeat("a", 48) + `-node-0-15-abcde"), and JobSet allows 63: with this runtime and number of nodes, the name can have at most 47 characters`,
		},
		"pod names of 63 characters are fine": {
			runtime:  utiltesting.MakeRuntimeSpec().Obj(),
			trainJob: utiltesting.MakeTrainJob(strings.Repeat("a", 47), "ns").NumNodes(16).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return utiltesting.MakeJobSet(tj, rt).NumNodes("node", 16).Obj()
			},
		},
		"a TrainJob whose volume claims JobSet would name longer than 63 characters is refused, with the length the name may have": {
			runtime: func() trainer.TrainingRuntimeSpec {
				rt := utiltesting.MakeRuntimeSpec().Obj()
				claim := corev1.PersistentVolumeClaim{}
				claim.Name = "checkpoints-of-every-node-of-the-run"
				rt.Template.Spec.VolumeClaimPolicies = []jobsetv1alpha2.VolumeClaimPolicy{{Templates: []corev1.PersistentVolumeClaim{claim}}}
				return rt
			}(),
			trainJob: utiltesting.MakeTrainJob(strings.Repeat("a", 27), "ns").Obj(),
			wantErr: `metadata.name: Invalid value: "` + strings.Repeat("a", 27) + `": the runtime's volume "checkpoints-of-every-node-of-the-run" would be a PersistentVolumeClaim named "checkpoints-of-every-node-of-the-run-` +
				strings.Repeat("a", 27) + `", of 64 characters, and JobSet allows 63: with this runtime, the name can have at most 26 characters`,
		},
		"JobSet's defaults do not override the runtime's settings": {
			runtime: func() trainer.TrainingRuntimeSpec {
				rt := utiltesting.MakeRuntimeSpec().Obj()
				rt.Template.Spec.SuccessPolicy = &jobsetv1alpha2.SuccessPolicy{Operator: jobsetv1alpha2.OperatorAny}
				rt.Template.Spec.Network = &jobsetv1alpha2.Network{Subdomain: "training", EnableDNSHostnames: ptr.To(false)}
				rt.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
				return rt
			}(),
			trainJob: tj().Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				js := utiltesting.MakeJobSet(tj, rt).Obj()
				js.Spec.Network.PublishNotReadyAddresses = ptr.To(true)
				return js
			},
		},
		"override nodeSelector is merged and wins": {
			runtime: func() trainer.TrainingRuntimeSpec {
				rt := utiltesting.MakeRuntimeSpec().Obj()
				rt.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.NodeSelector = map[string]string{"pool": "cpu", "zone": "a"}
				return rt
			}(),
			trainJob: tj().PodSpecOverrides(trainer.PodSpecOverride{PodSpecPatch: trainer.PodSpecPatch{NodeSelector: map[string]string{"pool": "gpu"}}}).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return utiltesting.MakeJobSet(tj, rt).PodSpec("node", func(s *corev1.PodSpec) {
					s.NodeSelector = map[string]string{"pool": "gpu", "zone": "a"}
				}).Obj()
			},
		},
		"override tolerations are added and affinity replaced": {
			runtime: func() trainer.TrainingRuntimeSpec {
				rt := utiltesting.MakeRuntimeSpec().Obj()
				s := &rt.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec
				s.Tolerations = []corev1.Toleration{{Key: "runtime", Operator: corev1.TolerationOpExists}}
				s.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{}}
				return rt
			}(),
			trainJob: tj().PodSpecOverrides(trainer.PodSpecOverride{PodSpecPatch: trainer.PodSpecPatch{Tolerations: []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}}, Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{}}}}).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return utiltesting.MakeJobSet(tj, rt).PodSpec("node", func(s *corev1.PodSpec) {
					s.Tolerations = append(s.Tolerations, corev1.Toleration{Key: "gpu", Operator: corev1.TolerationOpExists})
					s.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{}}
				}).Obj()
			},
		},
		"an override volume replaces the runtime's volume of that name, source and all, and mounts are keyed by path": {
			runtime: func() trainer.TrainingRuntimeSpec {
				rt := utiltesting.MakeRuntimeSpec().Obj()
				s := &rt.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec
				s.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
				s.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
				return rt
			}(),
			trainJob: tj().PodSpecOverrides(trainer.PodSpecOverride{PodSpecPatch: trainer.PodSpecPatch{Volumes: []corev1.Volume{
				{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "pvc"}}},
				{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			}, Containers: []trainer.ContainerPatch{{Name: "node", VolumeMounts: []corev1.VolumeMount{
				{Name: "data", MountPath: "/data", ReadOnly: true}, {Name: "cache", MountPath: "/cache"},
			}}}}}).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return utiltesting.MakeJobSet(tj, rt).PodSpec("node", func(s *corev1.PodSpec) {
					s.Volumes = []corev1.Volume{
						{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "pvc"}}},
						{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
					}
					s.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data", ReadOnly: true}, {Name: "cache", MountPath: "/cache"}}
				}).Obj()
			},
		},
		"override init container env is merged by name": {
			runtime:  fullRuntime().Obj(),
			trainJob: tj().PodSpecOverrides(trainer.PodSpecOverride{TargetJobs: []string{"node"}, PodSpecPatch: trainer.PodSpecPatch{InitContainers: []trainer.ContainerPatch{{Name: "fetch", Env: env("USER_ID", "123")}}}}).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return utiltesting.MakeJobSet(tj, rt).PodSpec("node", func(s *corev1.PodSpec) {
					s.InitContainers[0].Env = env("USER_ID", "123")
				}).Obj()
			},
		},
		"override scheduling gates and image pull secrets are merged by name": {
			runtime: func() trainer.TrainingRuntimeSpec {
				rt := utiltesting.MakeRuntimeSpec().Obj()
				s := &rt.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec
				s.SchedulingGates = []corev1.PodSchedulingGate{{Name: "runtime-gate"}}
				s.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "registry"}}
				return rt
			}(),
			trainJob: tj().PodSpecOverrides(trainer.PodSpecOverride{PodSpecPatch: trainer.PodSpecPatch{SchedulingGates: []corev1.PodSchedulingGate{{Name: "kueue"}, {Name: "runtime-gate"}}, ImagePullSecrets: []corev1.LocalObjectReference{{Name: "registry"}, {Name: "team"}}}}).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return utiltesting.MakeJobSet(tj, rt).PodSpec("node", func(s *corev1.PodSpec) {
					s.SchedulingGates = []corev1.PodSchedulingGate{{Name: "runtime-gate"}, {Name: "kueue"}}
					s.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "registry"}, {Name: "team"}}
				}).Obj()
			},
		},
		"later overrides win over earlier ones": {
			runtime: fullRuntime().Obj(),
			trainJob: tj().PodSpecOverrides(
				trainer.PodSpecOverride{PodSpecPatch: trainer.PodSpecPatch{ServiceAccountName: ptr.To("first")}},
				trainer.PodSpecOverride{TargetJobs: []string{"node"}, PodSpecPatch: trainer.PodSpecPatch{ServiceAccountName: ptr.To("second")}},
			).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return utiltesting.MakeJobSet(tj, rt).
					PodSpec("dataset-initializer", func(s *corev1.PodSpec) { s.ServiceAccountName = "first" }).
					PodSpec("model-initializer", func(s *corev1.PodSpec) { s.ServiceAccountName = "first" }).
					PodSpec("node", func(s *corev1.PodSpec) { s.ServiceAccountName = "second" }).Obj()
			},
		},
		"TrainJob labels and annotations land on the JobSet, every Job and every pod, and win over the runtime's": {
			runtime: func() trainer.TrainingRuntimeSpec {
				rt := fullRuntime().Obj()
				rt.Template.Labels = map[string]string{"team": "runtime", "tier": "gold"}
				rt.Template.Spec.ReplicatedJobs[2].Template.Spec.Template.Labels["team"] = "runtime"
				return rt
			}(),
			trainJob: func() *trainer.TrainJob {
				o := tj().Obj()
				o.Spec.Labels = map[string]string{"team": "job"}
				o.Spec.Annotations = map[string]string{"note": "job"}
				return o
			}(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				w := utiltesting.MakeJobSet(tj, rt).
					Labels(map[string]string{"team": "job", "tier": "gold"}).
					Annotations(map[string]string{"note": "job"})
				for _, job := range []string{"dataset-initializer", "model-initializer", "node"} {
					w.ReplicatedJob(job, func(j *jobsetv1alpha2.ReplicatedJob) {
						j.Template.Labels = map[string]string{"team": "job"}
						j.Template.Annotations = map[string]string{"note": "job"}
						j.Template.Spec.Template.Labels["team"] = "job"
						j.Template.Spec.Template.Annotations = map[string]string{"note": "job"}
					})
				}
				return w.Obj()
			},
		},
		"the Jobs' TrainJob name label is the operator's, whatever the runtime says": {
			runtime: func() trainer.TrainingRuntimeSpec {
				rt := utiltesting.MakeRuntimeSpec().Obj()
				rt.Template.Spec.ReplicatedJobs[0].Template.Labels = map[string]string{trainer.TrainJobNameLabel: "another"}
				return rt
			}(),
			trainJob: tj().Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return utiltesting.MakeJobSet(tj, rt).Obj() // Obj labels the Jobs with tj's name.
			},
		},
		"a TrainJob may not set the operator's labels": {
			runtime: utiltesting.MakeRuntimeSpec().Obj(),
			trainJob: func() *trainer.TrainJob {
				o := tj().Obj()
				o.Spec.Labels = map[string]string{trainer.TrainJobNameLabel: "another"}
				return o
			}(),
			wantErr: "spec.labels[trainer.kubeflow.org/trainjob-name]: Forbidden: is set by the operator on what it builds, and may not be set by hand",
		},
		"a TrainJob may not give its trainer the progress endpoint's CA": {
			runtime: utiltesting.MakeRuntimeSpec().Obj(),
			trainJob: func() *trainer.TrainJob {
				o := tj().Obj()
				o.Spec.Annotations = map[string]string{progress.CAAnnotation: "-----BEGIN CERTIFICATE-----"}
				return o
			}(),
			wantErr: "spec.annotations[trainer.kubeflow.org/progress-ca]: Forbidden: is set by the operator on what it builds, and may not be set by hand",
		},
		"the runtime's JobSet labels and annotations are kept": {
			runtime: func() trainer.TrainingRuntimeSpec {
				rt := utiltesting.MakeRuntimeSpec().Obj()
				rt.Template.Labels = map[string]string{"runtime": "yes"}
				rt.Template.Annotations = map[string]string{"docs": "https://example.com"}
				return rt
			}(),
			trainJob: tj().Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return utiltesting.MakeJobSet(tj, rt).Obj()
			},
		},
		"a suspended TrainJob builds a suspended JobSet": {
			runtime:  utiltesting.MakeRuntimeSpec().Obj(),
			trainJob: tj().Suspend(true).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return utiltesting.MakeJobSet(tj, rt).Suspend(true).Obj()
			},
		},
		"trainer values, the framework, overrides and labels all apply together": {
			runtime:   fullRuntime().NumNodes(2).Obj(),
			framework: stubFramework{},
			trainJob: func() *trainer.TrainJob {
				o := tj().NumNodes(3).Trainer(&trainer.Trainer{NumNodes: ptr.To[int32](3), Image: ptr.To("img"), Env: env("B", "job")}).
					Initializer(&trainer.Initializer{Dataset: &trainer.DatasetInitializer{StorageUri: ptr.To("hf://d")}}).
					PodSpecOverrides(trainer.PodSpecOverride{TargetJobs: []string{"node"}, PodSpecPatch: trainer.PodSpecPatch{NodeSelector: map[string]string{"gpu": "a100"}}}).
					Suspend(true).Obj()
				o.Spec.Labels = map[string]string{"team": "a"}
				return o
			}(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				w := utiltesting.MakeJobSet(tj, rt).Suspend(true).Labels(map[string]string{"team": "a"}).NumNodes("node", 3).
					Container("node", "node", func(c *corev1.Container) {
						c.Image = "img"
						c.Env = env("A", "runtime", "B", "job", "FRAMEWORK_VAR", "framework")
					}).
					Container("dataset-initializer", "dataset-initializer", func(c *corev1.Container) { c.Env = env(StorageURIEnv, "hf://d") }).
					PodSpec("node", func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{"gpu": "a100"} })
				for _, job := range []string{"dataset-initializer", "model-initializer", "node"} {
					w.ReplicatedJob(job, func(j *jobsetv1alpha2.ReplicatedJob) {
						j.Template.Labels = map[string]string{"team": "a"}
						j.Template.Spec.Template.Labels["team"] = "a"
					})
				}
				return w.Obj()
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rt := &trainingruntime.Runtime{Kind: trainer.TrainingRuntimeKind, Name: "rt", Spec: &tc.runtime}
			fw := tc.framework
			if fw == nil {
				fw = plain.New()
			}
			runtimeBefore, trainJobBefore := tc.runtime.DeepCopy(), tc.trainJob.DeepCopy()

			children, err := Build(tc.trainJob, rt, fw)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			if diff := cmp.Diff(tc.want(trainJobBefore, *runtimeBefore), utiltesting.FromApplyConfiguration[jobsetv1alpha2.JobSet](t, children.JobSet)); diff != "" {
				t.Errorf("JobSet (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(runtimeBefore, &tc.runtime); diff != "" {
				t.Errorf("building changed the runtime (-before +after):\n%s", diff)
			}
			if diff := cmp.Diff(trainJobBefore, tc.trainJob); diff != "" {
				t.Errorf("building changed the TrainJob (-before +after):\n%s", diff)
			}
		})
	}
}

// withNodeResources is a runtime whose trainer container requests cpu and memory, and is limited
// to cpuLimit and the same memory.
func withNodeResources(cpu, cpuLimit, memory string) trainer.TrainingRuntimeSpec {
	rt := utiltesting.MakeRuntimeSpec().Obj()
	rt.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[0].Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory)},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpuLimit), corev1.ResourceMemory: resource.MustParse(memory)},
	}
	return rt
}

// A manager built without the framework a runtime's policy names refuses it at the policy, rather
// than fail.
func TestAPolicyNoFrameworkServesIsRefused(t *testing.T) {
	rt := &trainingruntime.Runtime{Kind: trainer.TrainingRuntimeKind, Name: "rt", Spec: ptr.To(utiltesting.MakeRuntimeSpec().Obj())}
	_, err := Build(utiltesting.MakeTrainJob("tj", "ns").Obj(), rt, nil)
	if err == nil || !strings.Contains(err.Error(), `TrainingRuntime "rt": spec.mlPolicy: Invalid value`) {
		t.Errorf("Build without a framework = %v, want a refusal at spec.mlPolicy", err)
	}
}

// A runtime stored before the schema refused its JobSet's or Jobs' own deadline and TTL builds no
// TrainJob: the TrainJob's decide when the training stops and goes.
func TestARuntimeWithItsOwnLifetimesIsRefused(t *testing.T) {
	for name, tc := range map[string]struct {
		edit    func(*trainer.TrainingRuntimeSpec)
		wantErr string
	}{
		"the JobSet's ttlSecondsAfterFinished": {
			edit:    func(s *trainer.TrainingRuntimeSpec) { s.Template.Spec.TTLSecondsAfterFinished = ptr.To[int32](60) },
			wantErr: `TrainingRuntime "rt": spec.template.spec.ttlSecondsAfterFinished: Forbidden: the JobSet template may not set ttlSecondsAfterFinished`,
		},
		"a Job's activeDeadlineSeconds": {
			edit: func(s *trainer.TrainingRuntimeSpec) {
				s.Template.Spec.ReplicatedJobs[0].Template.Spec.ActiveDeadlineSeconds = ptr.To[int64](60)
			},
			wantErr: `TrainingRuntime "rt": spec.template.spec.replicatedJobs[0].template.spec.activeDeadlineSeconds: Forbidden: a replicated job's Job template may not set activeDeadlineSeconds`,
		},
		"a Job's ttlSecondsAfterFinished": {
			edit: func(s *trainer.TrainingRuntimeSpec) {
				s.Template.Spec.ReplicatedJobs[0].Template.Spec.TTLSecondsAfterFinished = ptr.To[int32](60)
			},
			wantErr: `TrainingRuntime "rt": spec.template.spec.replicatedJobs[0].template.spec.ttlSecondsAfterFinished: Forbidden`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			spec := utiltesting.MakeRuntimeSpec().Obj()
			tc.edit(&spec)
			_, err := Build(utiltesting.MakeTrainJob("tj", "ns").Obj(), &trainingruntime.Runtime{Kind: trainer.TrainingRuntimeKind, Name: "rt", Spec: &spec}, plain.New())
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}
