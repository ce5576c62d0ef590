package pipeline

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework/plain"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/internal/trainingruntime"
)

// Kueue's manager name, as it writes its runtime patch.
const kueueManager = "kueue.x-k8s.io/manager"

func TestRuntimePatches(t *testing.T) {
	tj := func() *utiltesting.TrainJobWrapper { return utiltesting.MakeTrainJob("tj", "ns").UID("tj-uid") }
	flavor := &trainer.PodSpecPatch{
		NodeSelector:    map[string]string{"flavor": "a100"},
		Tolerations:     []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}},
		SchedulingGates: []corev1.PodSchedulingGate{{Name: "kueue.x-k8s.io/topology"}},
	}
	cases := map[string]struct {
		trainJob *trainer.TrainJob
		runtime  func(*corev1.PodSpec)            // changes to the runtime's node pod, if any
		want     func(*utiltesting.JobSetWrapper) // changes from the runtime's JobSet
		wantErr  string
	}{
		"Kueue's placement reaches the pods of the job it names": {
			trainJob: tj().RuntimePatches(utiltesting.JobPatch(kueueManager, utiltesting.PodPatch("node",
				&trainer.MetadataPatch{Labels: map[string]string{"kueue.x-k8s.io/podset": "node"}, Annotations: map[string]string{"a": "b"}},
				flavor))).Obj(),
			want: func(w *utiltesting.JobSetWrapper) {
				w.ReplicatedJob("node", func(j *jobsetv1alpha2.ReplicatedJob) {
					j.Template.Spec.Template.Labels["kueue.x-k8s.io/podset"] = "node"
					j.Template.Spec.Template.Annotations = map[string]string{"a": "b"}
				}).PodSpec("node", func(s *corev1.PodSpec) {
					s.NodeSelector = flavor.NodeSelector
					s.Tolerations = flavor.Tolerations
					s.SchedulingGates = flavor.SchedulingGates
				})
			},
		},
		"a patch's tolerations replace the runtime's, as upstream's do": {
			trainJob: tj().RuntimePatches(utiltesting.JobPatch(kueueManager, utiltesting.PodPatch("node", nil, flavor))).Obj(),
			runtime: func(s *corev1.PodSpec) {
				s.Tolerations = []corev1.Toleration{{Key: "runtime", Operator: corev1.TolerationOpExists}}
			},
			want: func(w *utiltesting.JobSetWrapper) {
				w.PodSpec("node", func(s *corev1.PodSpec) {
					s.NodeSelector = flavor.NodeSelector
					s.Tolerations = flavor.Tolerations
					s.SchedulingGates = flavor.SchedulingGates
				})
			},
		},
		"JobSet and Job template metadata are patched where the patch says": {
			trainJob: tj().RuntimePatches(trainer.RuntimePatch{Manager: "me", TrainingRuntimeSpec: &trainer.TrainingRuntimeSpecPatch{
				Template: &trainer.JobSetTemplatePatch{
					Metadata: &trainer.MetadataPatch{Labels: map[string]string{"on": "jobset"}},
					Spec: &trainer.JobSetSpecPatch{ReplicatedJobs: []trainer.ReplicatedJobPatch{{
						Name:     "model-initializer",
						Template: &trainer.JobTemplatePatch{Metadata: &trainer.MetadataPatch{Annotations: map[string]string{"on": "job"}}},
					}}},
				},
			}}).Obj(),
			want: func(w *utiltesting.JobSetWrapper) {
				w.Labels(map[string]string{"on": "jobset"}).ReplicatedJob("model-initializer", func(j *jobsetv1alpha2.ReplicatedJob) {
					j.Template.Annotations = map[string]string{"on": "job"}
				})
			},
		},
		"patches apply in list order, after spec.labels and podSpecOverrides": {
			trainJob: func() *trainer.TrainJob {
				o := tj().RuntimePatches(
					utiltesting.JobPatch("first", utiltesting.PodPatch("node", &trainer.MetadataPatch{Labels: map[string]string{"team": "first"}},
						&trainer.PodSpecPatch{ServiceAccountName: ptr.To("first"), Containers: []trainer.ContainerPatch{{Name: "node", Env: []corev1.EnvVar{{Name: "A", Value: "first"}}}}})),
					utiltesting.JobPatch("second", utiltesting.PodPatch("node", nil,
						&trainer.PodSpecPatch{ServiceAccountName: ptr.To("second"), SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000)},
							Containers: []trainer.ContainerPatch{{Name: "sidecar", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(false)}}}})),
				).PodSpecOverrides(trainer.PodSpecOverride{PodSpecPatch: trainer.PodSpecPatch{ServiceAccountName: ptr.To("override")}},
					trainer.PodSpecOverride{TargetJobs: []string{"node"}, PodSpecPatch: trainer.PodSpecPatch{
						Containers: []trainer.ContainerPatch{{Name: "node", Env: []corev1.EnvVar{{Name: "A", Value: "override"}}}},
					}}).Obj()
				o.Spec.Labels = map[string]string{"team": "trainjob"}
				return o
			}(),
			want: func(w *utiltesting.JobSetWrapper) {
				w.Labels(map[string]string{"team": "trainjob"})
				for _, job := range []string{"dataset-initializer", "model-initializer", "node"} {
					w.PodSpec(job, func(s *corev1.PodSpec) { s.ServiceAccountName = "override" }).
						ReplicatedJob(job, func(j *jobsetv1alpha2.ReplicatedJob) {
							j.Template.Labels = map[string]string{"team": "trainjob"}
							j.Template.Spec.Template.Labels["team"] = "trainjob"
						})
				}
				w.ReplicatedJob("node", func(j *jobsetv1alpha2.ReplicatedJob) { j.Template.Spec.Template.Labels["team"] = "first" }).
					PodSpec("node", func(s *corev1.PodSpec) {
						s.ServiceAccountName = "second"
						s.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000)}
					}).
					Container("node", "node", func(c *corev1.Container) { c.Env[0].Value = "first" }).
					Container("node", "sidecar", func(c *corev1.Container) { c.SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(false)} })
			},
		},
		"a patch of a job the runtime lacks cannot be built": {
			trainJob: tj().RuntimePatches(utiltesting.JobPatch("a"), utiltesting.JobPatch(kueueManager,
				utiltesting.PodPatch("node", nil, nil), utiltesting.PodPatch("launcher", nil, flavor))).Obj(),
			wantErr: `spec.runtimePatches[1].trainingRuntimeSpec.template.spec.replicatedJobs[1].name: Invalid value: "launcher": TrainingRuntime "rt" has no replicated job of that name`,
		},
		"a patch of a container the job lacks cannot be built": {
			trainJob: tj().RuntimePatches(utiltesting.JobPatch("me", utiltesting.PodPatch("node", nil,
				&trainer.PodSpecPatch{InitContainers: []trainer.ContainerPatch{{Name: "fetch"}, {Name: "proxy"}}}))).Obj(),
			wantErr: `spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec.initContainers[1].name: Invalid value: "proxy": replicated job "node" of TrainingRuntime "rt" has no init container of that name`,
		},
		"a patch that sets the framework's env var on the trainer container cannot be built": {
			trainJob: tj().RuntimePatches(utiltesting.JobPatch("me", utiltesting.PodPatch("node", nil,
				&trainer.PodSpecPatch{Containers: []trainer.ContainerPatch{{Name: "node", Env: []corev1.EnvVar{{Name: "FRAMEWORK_VAR", Value: "x"}}}}}))).Obj(),
			wantErr: "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec.containers[0].env[0].name: Forbidden: FRAMEWORK_VAR is set by the stub framework",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			spec := fullRuntime().Obj()
			if tc.runtime != nil {
				for i := range spec.Template.Spec.ReplicatedJobs {
					if job := &spec.Template.Spec.ReplicatedJobs[i]; job.Name == "node" {
						tc.runtime(&job.Template.Spec.Template.Spec)
					}
				}
			}
			rt := &trainingruntime.Runtime{Kind: trainer.TrainingRuntimeKind, Name: "rt", Spec: &spec}
			children, err := Build(tc.trainJob, rt, stubFramework{})
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			want := utiltesting.MakeJobSet(tc.trainJob, spec).
				Container("node", "node", func(c *corev1.Container) {
					c.Env = append(c.Env, corev1.EnvVar{Name: "FRAMEWORK_VAR", Value: "framework"})
				})
			tc.want(want)
			if diff := cmp.Diff(want.Obj(), utiltesting.FromApplyConfiguration[jobsetv1alpha2.JobSet](t, children.JobSet)); diff != "" {
				t.Errorf("JobSet (-want +got):\n%s", diff)
			}
		})
	}
}

// Upstream Kubeflow Trainer labels the Job template with the ancestor step, KEP-2170 the pod
// template: either finds the trainer, and the two must agree where both are set.
func TestAncestorLabel(t *testing.T) {
	tj := utiltesting.MakeTrainJob("tj", "ns").NumNodes(3).Obj()
	onJob := func(job jobsetv1alpha2.ReplicatedJob, ancestor string) jobsetv1alpha2.ReplicatedJob {
		job.Template.Labels = map[string]string{trainer.AncestorStepLabel: ancestor}
		return job
	}
	cases := map[string]struct {
		jobs    []jobsetv1alpha2.ReplicatedJob
		wantErr string
	}{
		"on the Job template only": {jobs: []jobsetv1alpha2.ReplicatedJob{
			utiltesting.ReplicatedJob("launcher", "", "launcher"), onJob(utiltesting.ReplicatedJob("node", "", "node"), trainer.AncestorTrainer)}},
		"on both, agreeing": {jobs: []jobsetv1alpha2.ReplicatedJob{
			onJob(utiltesting.ReplicatedJob("node", trainer.AncestorTrainer, "node"), trainer.AncestorTrainer)}},
		"on both, disagreeing": {
			jobs: []jobsetv1alpha2.ReplicatedJob{
				onJob(utiltesting.ReplicatedJob("node", trainer.AncestorTrainer, "node"), trainer.AncestorModelInitializer)},
			wantErr: `TrainingRuntime "rt": spec.template.spec.replicatedJobs[0].template.spec.template.metadata.labels[trainer.kubeflow.org/trainjob-ancestor-step]: Invalid value: "trainer": the Job template says trainer.kubeflow.org/trainjob-ancestor-step=model-initializer: the two labels must agree`,
		},
		"two trainer jobs, one labelled on its Job template": {
			jobs: []jobsetv1alpha2.ReplicatedJob{
				utiltesting.ReplicatedJob("a", trainer.AncestorTrainer, "node"), onJob(utiltesting.ReplicatedJob("b", "", "node"), trainer.AncestorTrainer)},
			wantErr: `spec.template.spec.replicatedJobs[1].template.metadata.labels: Invalid value: "trainer.kubeflow.org/trainjob-ancestor-step=trainer": only one replicated job may run the trainer`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			spec := utiltesting.MakeRuntimeSpec().ReplicatedJobs(tc.jobs...).Obj()
			children, err := Build(tj, &trainingruntime.Runtime{Kind: trainer.TrainingRuntimeKind, Name: "rt", Spec: &spec}, plain.New())
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			js := utiltesting.FromApplyConfiguration[jobsetv1alpha2.JobSet](t, children.JobSet)
			node := js.Spec.ReplicatedJobs[len(js.Spec.ReplicatedJobs)-1]
			require.Equal(t, ptr.To[int32](3), node.Template.Spec.Parallelism, "the trainer job runs numNodes pods")
		})
	}
}

// numProcPerNode reaches only the frameworks that read it; elsewhere it would be silently
// ignored, so it is refused.
func TestNumProcPerNodeOnlyWhereRead(t *testing.T) {
	tj := utiltesting.MakeTrainJob("tj", "ns").NumProcPerNode(intstr.FromInt32(4)).Obj()
	spec := fullRuntime().Obj()
	rt := &trainingruntime.Runtime{Kind: trainer.TrainingRuntimeKind, Name: "rt", Spec: &spec}
	_, err := Build(tj, rt, plain.New())
	require.EqualError(t, err, `spec.trainer.numProcPerNode: Forbidden: TrainingRuntime "rt" runs the plain framework, which does not use it (torch, mpi and flux do)`)

	_, err = Build(tj, rt, readsProcs{})
	require.NoError(t, err)
}

// readsProcs is a framework that reads numProcPerNode.
type readsProcs struct{ stubFramework }

func (readsProcs) ReadsNumProcPerNode() {}
