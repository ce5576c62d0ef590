package api

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
)

// names returns n distinct names: prefix-0, prefix-1, ...
func names(prefix string, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("%s-%d", prefix, i))
	}
	return out
}

func TestTrainJobDefaults(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	tj := utiltesting.MakeTrainJob("defaults", ns).Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))

	want := trainer.TrainJobSpec{
		RuntimeRef: trainer.RuntimeRef{
			Name:     "runtime",
			APIGroup: ptr.To("trainer.kubeflow.org"),
			Kind:     ptr.To("ClusterTrainingRuntime"),
		},
		Suspend:   ptr.To(false),
		ManagedBy: ptr.To("trainer.kubeflow.org/trainjob-controller"),
	}
	if diff := cmp.Diff(want, tj.Spec); diff != "" {
		t.Errorf("defaulted TrainJob spec (-want +got):\n%s", diff)
	}
}

func TestRuntimeDefaults(t *testing.T) {
	cases := map[string]struct {
		spec trainer.TrainingRuntimeSpec
		want func(*trainer.TrainingRuntimeSpec) any
		exp  any
	}{
		"torch numProcPerNode defaults to auto": {
			spec: utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{}).Obj(),
			want: func(s *trainer.TrainingRuntimeSpec) any { return s.MLPolicy.Torch },
			exp:  &trainer.TorchMLPolicySource{NumProcPerNode: ptr.To(intstr.FromString("auto"))},
		},
		"mpi defaults to one OpenMPI slot per node, keys in /root/.ssh, launcher not a node": {
			spec: utiltesting.MakeRuntimeSpec().MPI(&trainer.MPIMLPolicySource{}).Obj(),
			want: func(s *trainer.TrainingRuntimeSpec) any { return s.MLPolicy.MPI },
			exp: &trainer.MPIMLPolicySource{
				NumProcPerNode:    ptr.To[int32](1),
				MPIImplementation: ptr.To(trainer.MPIImplementationOpenMPI),
				SSHAuthMountPath:  ptr.To("/root/.ssh"),
				RunLauncherAsNode: ptr.To(false),
			},
		},
		"xgboost tracker port defaults to 9091": {
			spec: utiltesting.MakeRuntimeSpec().XGBoost(&trainer.XGBoostMLPolicySource{}).Obj(),
			want: func(s *trainer.TrainingRuntimeSpec) any { return s.MLPolicy.XGBoost },
			exp:  &trainer.XGBoostMLPolicySource{TrackerPort: ptr.To[int32](9091)},
		},
		"flux runs one task per node by default, as upstream's flux: {}": {
			spec: utiltesting.MakeRuntimeSpec().Flux(&trainer.FluxMLPolicySource{}).Obj(),
			want: func(s *trainer.TrainingRuntimeSpec) any { return s.MLPolicy.Flux },
			exp:  &trainer.FluxMLPolicySource{NumProcPerNode: ptr.To[int32](1)},
		},
		"coscheduling timeout defaults to 60 seconds": {
			spec: utiltesting.MakeRuntimeSpec().PodGroupPolicy(trainer.PodGroupPolicySource{
				Coscheduling: &trainer.CoschedulingPodGroupPolicySource{},
			}).Obj(),
			want: func(s *trainer.TrainingRuntimeSpec) any { return s.PodGroupPolicy.Coscheduling },
			exp:  &trainer.CoschedulingPodGroupPolicySource{ScheduleTimeoutSeconds: ptr.To[int32](60)},
		},
		"a stall policy fails a stalled TrainJob by default, and restarts one at most 3 times": {
			spec: utiltesting.MakeRuntimeSpec().StallPolicy(&trainer.StallPolicy{ProgressDeadlineSeconds: 600}).Obj(),
			want: func(s *trainer.TrainingRuntimeSpec) any { return s.StallPolicy },
			exp:  &trainer.StallPolicy{ProgressDeadlineSeconds: 600, Action: trainer.StallActionFail, MaxRestarts: ptr.To[int32](3)},
		},
		"numNodes is left to the runtime's framework: omitted stays omitted": {
			spec: utiltesting.MakeRuntimeSpec().JAX().Obj(),
			want: func(s *trainer.TrainingRuntimeSpec) any { return s.MLPolicy.NumNodes },
			exp:  (*int32)(nil),
		},
	}
	ctx := context.Background()
	ns := newNamespace(t)
	i := 0
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			i++
			// Both kinds share the spec type, so both must default the same way.
			ctr := utiltesting.ClusterTrainingRuntime(fmt.Sprintf("%s-%d", ns, i), tc.spec)
			require.NoError(t, k8sClient.Create(ctx, ctr))
			tr := utiltesting.TrainingRuntime(fmt.Sprintf("defaults-%d", i), ns, tc.spec)
			require.NoError(t, k8sClient.Create(ctx, tr))
			if diff := cmp.Diff(tc.exp, tc.want(&ctr.Spec)); diff != "" {
				t.Errorf("ClusterTrainingRuntime (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.exp, tc.want(&tr.Spec)); diff != "" {
				t.Errorf("TrainingRuntime (-want +got):\n%s", diff)
			}
		})
	}
}

// TestInvalidObjectsAreRejected creates each object and expects the API server to refuse it with
// an error that contains every one of the wanted fragments: the field path and the reason.
func TestInvalidObjectsAreRejected(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	tj := func(name string) *utiltesting.TrainJobWrapper { return utiltesting.MakeTrainJob(name, ns) }
	rt := func(spec *utiltesting.RuntimeSpecWrapper) client.Object {
		return utiltesting.TrainingRuntime("bad", ns, spec.Obj())
	}
	torch := &trainer.TorchMLPolicySource{}
	elastic := func(minNodes, maxNodes int32) *trainer.TorchMLPolicySource {
		return &trainer.TorchMLPolicySource{ElasticPolicy: &trainer.TorchElasticPolicy{MinNodes: &minNodes, MaxNodes: &maxNodes}}
	}

	cases := []struct {
		name string
		obj  client.Object
		want []string
	}{
		{
			name: "TrainJob name that is not a DNS-1035 label",
			obj:  tj("1st-job").Obj(),
			want: []string{"metadata.name must be a DNS-1035 label"},
		},
		{
			name: "TrainJob name with a dot",
			obj:  tj("my.job").Obj(),
			want: []string{"metadata.name must be a DNS-1035 label"},
		},
		{
			name: "TrainJob name longer than 63 characters",
			obj:  tj(strings.Repeat("a", 64)).Obj(),
			want: []string{"metadata.name must be no more than 63 characters"},
		},
		{
			name: "runtimeRef without a name",
			obj:  func() client.Object { o := tj("no-runtime").Obj(); o.Spec.RuntimeRef.Name = ""; return o }(),
			want: []string{"spec.runtimeRef.name", "at least 1 chars long"},
		},
		{
			name: "runtimeRef of an unknown kind",
			obj:  tj("bad-kind").RuntimeRef("Runtime", "r").Obj(),
			want: []string{"spec.runtimeRef.kind", `Unsupported value: "Runtime"`, `"TrainingRuntime", "ClusterTrainingRuntime"`},
		},
		{
			name: "runtimeRef of another API group",
			obj: func() client.Object {
				o := tj("bad-group").Obj()
				o.Spec.RuntimeRef.APIGroup = ptr.To("example.com")
				return o
			}(),
			want: []string{"spec.runtimeRef.apiGroup", `Unsupported value: "example.com"`},
		},
		{
			name: "managedBy that is not a known controller",
			obj:  tj("bad-manager").ManagedBy("example.com/controller").Obj(),
			want: []string{"spec.managedBy", `Unsupported value: "example.com/controller"`},
		},
		{
			name: "zero trainer nodes",
			obj:  tj("zero-nodes").NumNodes(0).Obj(),
			want: []string{"spec.trainer.numNodes", "greater than or equal to 1"},
		},
		{
			name: "numProcPerNode that is a word",
			obj:  tj("bad-procs").NumProcPerNode(intstr.FromString("many")).Obj(),
			want: []string{"spec.trainer.numProcPerNode", "numProcPerNode must be a positive integer, auto, cpu or gpu"},
		},
		{
			name: "a device claim of both a claim and a template",
			obj: tj("both-claims").Trainer(&trainer.Trainer{ResourceClaimsPerNode: []trainer.TrainerResourceClaim{
				{Name: "gpus", ResourceClaimName: ptr.To("shared"), ResourceClaimTemplateName: ptr.To("h100-x8")},
			}}).Obj(),
			want: []string{"spec.trainer.resourceClaimsPerNode[0]", "exactly one of resourceClaimName and resourceClaimTemplateName must be set"},
		},
		{
			name: "a device claim of neither a claim nor a template",
			obj:  tj("no-claim").Trainer(&trainer.Trainer{ResourceClaimsPerNode: []trainer.TrainerResourceClaim{{Name: "gpus"}}}).Obj(),
			want: []string{"spec.trainer.resourceClaimsPerNode[0]", "exactly one of resourceClaimName and resourceClaimTemplateName must be set"},
		},
		{
			name: "a device claim whose name is not a DNS label",
			obj: tj("bad-claim-name").Trainer(&trainer.Trainer{ResourceClaimsPerNode: []trainer.TrainerResourceClaim{
				{Name: "GPUs", ResourceClaimTemplateName: ptr.To("h100-x8")},
			}}).Obj(),
			want: []string{"spec.trainer.resourceClaimsPerNode[0].name", "should match"},
		},
		{
			name: "two device claims of one name",
			obj: tj("same-claims").Trainer(&trainer.Trainer{ResourceClaimsPerNode: []trainer.TrainerResourceClaim{
				{Name: "gpus", ResourceClaimTemplateName: ptr.To("h100-x8")}, {Name: "gpus", ResourceClaimName: ptr.To("shared")},
			}}).Obj(),
			want: []string{"spec.trainer.resourceClaimsPerNode[1]", "Duplicate value"},
		},
		{
			name: "a ComputeDomain allocation mode NVIDIA's driver does not know",
			obj: func() client.Object {
				o := rt(utiltesting.MakeRuntimeSpec()).(*trainer.TrainingRuntime)
				o.Spec.ComputeDomain = &trainer.ComputeDomainPolicy{AllocationMode: "Many"}
				return o
			}(),
			want: []string{"spec.computeDomain.allocationMode", `Unsupported value: "Many"`, `"Single", "All"`},
		},
		{
			name: "activeDeadlineSeconds of zero",
			obj: func() client.Object {
				o := tj("no-time").Obj()
				o.Spec.ActiveDeadlineSeconds = ptr.To[int64](0)
				return o
			}(),
			want: []string{"spec.activeDeadlineSeconds", "greater than or equal to 1"},
		},
		{
			name: "progressDeadlineSeconds of zero",
			obj:  tj("no-patience").ProgressDeadlineSeconds(0).Obj(),
			want: []string{"spec.progressDeadlineSeconds", "greater than or equal to 1"},
		},
		{
			name: "stall policy deadline of zero",
			obj:  rt(utiltesting.MakeRuntimeSpec().StallPolicy(&trainer.StallPolicy{ProgressDeadlineSeconds: 0})),
			want: []string{"spec.stallPolicy.progressDeadlineSeconds", "greater than or equal to 1"},
		},
		{
			name: "stall policy of an unknown action",
			obj:  rt(utiltesting.MakeRuntimeSpec().StallPolicy(&trainer.StallPolicy{ProgressDeadlineSeconds: 60, Action: "Ignore"})),
			want: []string{"spec.stallPolicy.action", `Unsupported value: "Ignore"`, `"Fail", "Restart", "Report"`},
		},
		{
			name: "runtime patch without a manager",
			obj:  tj("anonymous-patch").RuntimePatches(trainer.RuntimePatch{}).Obj(),
			want: []string{"spec.runtimePatches[0].manager", "at least 1 chars long"},
		},
		{
			name: "two runtime patches of one manager",
			obj:  tj("twin-patches").RuntimePatches(trainer.RuntimePatch{Manager: "me"}, trainer.RuntimePatch{Manager: "me"}).Obj(),
			want: []string{"spec.runtimePatches[1]", "Duplicate value"},
		},
		{
			name: "numProcPerNode of zero",
			obj:  tj("zero-procs").NumProcPerNode(intstr.FromInt32(0)).Obj(),
			want: []string{"spec.trainer.numProcPerNode", "numProcPerNode must be a positive integer, auto, cpu or gpu"},
		},
		{
			name: "dataset storageUri without a scheme",
			obj: tj("bad-dataset").Initializer(&trainer.Initializer{
				Dataset: &trainer.DatasetInitializer{StorageUri: ptr.To("bucket/dataset")},
			}).Obj(),
			want: []string{"spec.initializer.dataset.storageUri", "storageUri must be empty, an absolute path, or have the form scheme://path"},
		},
		{
			name: "model storageUri without a path",
			obj: tj("bad-model").Initializer(&trainer.Initializer{
				Model: &trainer.ModelInitializer{StorageUri: ptr.To("hf://")},
			}).Obj(),
			want: []string{"spec.initializer.model.storageUri", "storageUri must be empty, an absolute path, or have the form scheme://path"},
		},
		{
			name: "container override without a name",
			obj:  tj("bad-override").PodSpecOverrides(trainer.PodSpecOverride{PodSpecPatch: trainer.PodSpecPatch{Containers: []trainer.ContainerPatch{{Name: ""}}}}).Obj(),
			want: []string{"spec.podSpecOverrides[0].containers[0].name", "at least 1 chars long"},
		},
		{
			name: "two ML frameworks in one runtime",
			obj:  rt(utiltesting.MakeRuntimeSpec().Torch(torch).MPI(&trainer.MPIMLPolicySource{})),
			want: []string{"spec.mlPolicy", "at most one of torch, mpi, xgboost, jax and flux may be set"},
		},
		{
			name: "xgboost and jax in one runtime",
			obj:  rt(utiltesting.MakeRuntimeSpec().XGBoost(&trainer.XGBoostMLPolicySource{}).JAX()),
			want: []string{"spec.mlPolicy", "at most one of torch, mpi, xgboost, jax and flux may be set"},
		},
		{
			name: "mpi and flux in one runtime",
			obj:  rt(utiltesting.MakeRuntimeSpec().MPI(&trainer.MPIMLPolicySource{}).Flux(&trainer.FluxMLPolicySource{})),
			want: []string{"spec.mlPolicy", "at most one of torch, mpi, xgboost, jax and flux may be set"},
		},
		{
			name: "no Flux tasks per node",
			obj:  rt(utiltesting.MakeRuntimeSpec().Flux(&trainer.FluxMLPolicySource{NumProcPerNode: ptr.To[int32](0)})),
			want: []string{"spec.mlPolicy.flux.numProcPerNode", "numProcPerNode must be at least 1"},
		},
		{
			name: "numNodes together with an elastic policy",
			obj:  rt(utiltesting.MakeRuntimeSpec().NumNodes(2).Torch(elastic(1, 3))),
			want: []string{"spec.mlPolicy", "numNodes must be omitted when torch.elasticPolicy is set"},
		},
		{
			name: "elastic minNodes above maxNodes",
			obj:  rt(utiltesting.MakeRuntimeSpec().Torch(elastic(4, 2))),
			want: []string{"spec.mlPolicy.torch.elasticPolicy", "minNodes must not be greater than maxNodes"},
		},
		{
			name: "zero runtime nodes",
			obj:  rt(utiltesting.MakeRuntimeSpec().NumNodes(0)),
			want: []string{"spec.mlPolicy.numNodes", "greater than or equal to 1"},
		},
		{
			name: "torch numProcPerNode that is negative",
			obj:  rt(utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{NumProcPerNode: ptr.To(intstr.FromInt32(-1))})),
			want: []string{"spec.mlPolicy.torch.numProcPerNode", "numProcPerNode must be a positive integer, auto, cpu or gpu"},
		},
		{
			name: "unknown MPI implementation",
			obj: rt(utiltesting.MakeRuntimeSpec().MPI(&trainer.MPIMLPolicySource{
				MPIImplementation: ptr.To[trainer.MPIImplementation]("LAM"),
			})),
			want: []string{"spec.mlPolicy.mpi.mpiImplementation", `Unsupported value: "LAM"`, `"OpenMPI", "Intel", "MPICH"`},
		},
		{
			name: "a JobSet template with its own TTL (the runtime's runPolicy deletes the TrainJob)",
			obj: rt(func() *utiltesting.RuntimeSpecWrapper {
				w := utiltesting.MakeRuntimeSpec()
				w.Template.Spec.TTLSecondsAfterFinished = ptr.To[int32](60)
				return w
			}()),
			want: []string{"spec.template", "the JobSet template may not set ttlSecondsAfterFinished: set runPolicy.ttlSecondsAfterFinished"},
		},
		{
			name: "a Job template with its own deadline (the runtime's runPolicy stops the TrainJob)",
			obj: rt(func() *utiltesting.RuntimeSpecWrapper {
				node := utiltesting.ReplicatedJob("node", trainer.AncestorTrainer, "node")
				node.Template.Spec.ActiveDeadlineSeconds = ptr.To[int64](60)
				return utiltesting.MakeRuntimeSpec().ReplicatedJobs(node)
			}()),
			want: []string{"spec.template", "a replicated job's Job template may not set activeDeadlineSeconds or ttlSecondsAfterFinished"},
		},
		{
			name: "a Job template with its own TTL",
			obj: rt(func() *utiltesting.RuntimeSpecWrapper {
				node := utiltesting.ReplicatedJob("node", trainer.AncestorTrainer, "node")
				node.Template.Spec.TTLSecondsAfterFinished = ptr.To[int32](0)
				return utiltesting.MakeRuntimeSpec().ReplicatedJobs(node)
			}()),
			want: []string{"spec.template", "a replicated job's Job template may not set activeDeadlineSeconds or ttlSecondsAfterFinished"},
		},
		{
			name: "a run policy's zero deadline",
			obj:  rt(utiltesting.MakeRuntimeSpec().RunPolicy(&trainer.RunPolicy{ActiveDeadlineSeconds: ptr.To[int64](0)})),
			want: []string{"spec.runPolicy.activeDeadlineSeconds", "greater than or equal to 1"},
		},
		{
			name: "a run policy's negative TTL",
			obj:  rt(utiltesting.MakeRuntimeSpec().RunPolicy(&trainer.RunPolicy{TTLSecondsAfterFinished: ptr.To[int32](-1)})),
			want: []string{"spec.runPolicy.ttlSecondsAfterFinished", "greater than or equal to 0"},
		},
		{
			name: "zero MPI slots",
			obj:  rt(utiltesting.MakeRuntimeSpec().MPI(&trainer.MPIMLPolicySource{NumProcPerNode: ptr.To[int32](0)})),
			want: []string{"spec.mlPolicy.mpi.numProcPerNode", "greater than or equal to 1"},
		},
		{
			name: "relative SSH mount path",
			obj:  rt(utiltesting.MakeRuntimeSpec().MPI(&trainer.MPIMLPolicySource{SSHAuthMountPath: ptr.To(".ssh")})),
			want: []string{"spec.mlPolicy.mpi.sshAuthMountPath", "sshAuthMountPath must be an absolute path"},
		},
		{
			name: "XGBoost tracker port out of range",
			obj:  rt(utiltesting.MakeRuntimeSpec().XGBoost(&trainer.XGBoostMLPolicySource{TrackerPort: ptr.To[int32](70000)})),
			want: []string{"spec.mlPolicy.xgboost.trackerPort", "less than or equal to 65535"},
		},
		{
			name: "two gang schedulers in one runtime",
			obj: rt(utiltesting.MakeRuntimeSpec().PodGroupPolicy(trainer.PodGroupPolicySource{
				Coscheduling: &trainer.CoschedulingPodGroupPolicySource{},
				Volcano:      &trainer.VolcanoPodGroupPolicySource{},
			})),
			want: []string{"spec.podGroupPolicy", "at most one of coscheduling, volcano, kaiScheduler and workload may be set"},
		},
		{
			name: "negative coscheduling timeout (0 is upstream's default)",
			obj: rt(utiltesting.MakeRuntimeSpec().PodGroupPolicy(trainer.PodGroupPolicySource{
				Coscheduling: &trainer.CoschedulingPodGroupPolicySource{ScheduleTimeoutSeconds: ptr.To[int32](-1)},
			})),
			want: []string{"spec.podGroupPolicy.coscheduling.scheduleTimeoutSeconds", "greater than or equal to 0"},
		},
		{
			name: "KAI queue that cannot be a label value",
			obj: rt(utiltesting.MakeRuntimeSpec().PodGroupPolicy(trainer.PodGroupPolicySource{
				KAIScheduler: &trainer.KAISchedulerPodGroupPolicySource{Queue: "team a"},
			})),
			want: []string{"spec.podGroupPolicy.kaiScheduler.queue", "should match"},
		},
		{
			name: "KAI policy without a queue",
			obj: rt(utiltesting.MakeRuntimeSpec().PodGroupPolicy(trainer.PodGroupPolicySource{
				KAIScheduler: &trainer.KAISchedulerPodGroupPolicySource{},
			})),
			want: []string{"spec.podGroupPolicy.kaiScheduler.queue", "at least 1 chars long"},
		},
		{
			name: "Volcano network topology of an unknown mode",
			obj: rt(utiltesting.MakeRuntimeSpec().PodGroupPolicy(trainer.PodGroupPolicySource{
				Volcano: &trainer.VolcanoPodGroupPolicySource{NetworkTopology: &volcanov1beta1.NetworkTopologySpec{Mode: "strict"}},
			})),
			want: []string{"spec.podGroupPolicy.volcano.networkTopology.mode", `Unsupported value: "strict"`, `"hard", "soft"`},
		},
		{
			name: "Volcano network topology below the lowest tier",
			obj: rt(utiltesting.MakeRuntimeSpec().PodGroupPolicy(trainer.PodGroupPolicySource{
				Volcano: &trainer.VolcanoPodGroupPolicySource{NetworkTopology: &volcanov1beta1.NetworkTopologySpec{HighestTierAllowed: ptr.To(0)}},
			})),
			want: []string{"spec.podGroupPolicy.volcano.networkTopology.highestTierAllowed", "highestTierAllowed must be at least 1"},
		},
		{
			name: "torch env injection target without containers",
			obj: rt(utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{EnvInjection: &trainer.EnvInjection{
				Targets: []trainer.EnvInjectionTarget{{JobName: "node"}},
			}})),
			want: []string{"spec.mlPolicy.torch.envInjection.targets[0].containerNames", "Required value"},
		},
		{
			name: "torch env injection target without a job name",
			obj: rt(utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{EnvInjection: &trainer.EnvInjection{
				Targets: []trainer.EnvInjectionTarget{{ContainerNames: []string{"node"}}},
			}})),
			want: []string{"spec.mlPolicy.torch.envInjection.targets[0].jobName", "at least 1 chars long"},
		},
		{
			name: "torch env injection naming a job twice",
			obj: rt(utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{EnvInjection: &trainer.EnvInjection{
				Targets: []trainer.EnvInjectionTarget{{JobName: "node", ContainerNames: []string{"a"}}, {JobName: "node", ContainerNames: []string{"b"}}},
			}})),
			want: []string{"spec.mlPolicy.torch.envInjection.targets[1]", "Duplicate value"},
		},
		{
			name: "torch env injection naming a container twice",
			obj: rt(utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{EnvInjection: &trainer.EnvInjection{
				Targets: []trainer.EnvInjectionTarget{{JobName: "node", ContainerNames: []string{"a", "a"}}},
			}})),
			want: []string{"spec.mlPolicy.torch.envInjection.targets[0].containerNames[1]", "Duplicate value"},
		},
		{
			name: "torch env injection of more than 16 containers of a job",
			obj: rt(utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{EnvInjection: &trainer.EnvInjection{
				Targets: []trainer.EnvInjectionTarget{{JobName: "node", ContainerNames: names("c", 17)}},
			}})),
			want: []string{"spec.mlPolicy.torch.envInjection.targets[0].containerNames", "must have at most 16 items"},
		},
		{
			name: "torch env injection into more than 16 jobs",
			obj: rt(utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{EnvInjection: &trainer.EnvInjection{
				Targets: func() []trainer.EnvInjectionTarget {
					var targets []trainer.EnvInjectionTarget
					for _, job := range names("job", 17) {
						targets = append(targets, trainer.EnvInjectionTarget{JobName: job, ContainerNames: []string{"node"}})
					}
					return targets
				}(),
			}})),
			want: []string{"spec.mlPolicy.torch.envInjection.targets", "must have at most 16 items"},
		},
		{
			name: "cluster runtime with two frameworks",
			obj: utiltesting.ClusterTrainingRuntime("bad-"+ns, utiltesting.MakeRuntimeSpec().
				Torch(torch).JAX().Obj()),
			want: []string{"spec.mlPolicy", "at most one of torch, mpi, xgboost, jax and flux may be set"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := k8sClient.Create(ctx, tc.obj)
			require.Error(t, err, "the API server accepted an invalid object")
			for _, fragment := range tc.want {
				assert.Contains(t, err.Error(), fragment)
			}
		})
	}
}

func TestImmutableFields(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	tj := utiltesting.MakeTrainJob("immutable", ns).Obj()
	tj.Spec.ActiveDeadlineSeconds = ptr.To[int64](3600)
	require.NoError(t, k8sClient.Create(ctx, tj))

	cases := map[string]struct {
		change func(*trainer.TrainJob)
		want   string
	}{
		"runtimeRef name": {
			change: func(tj *trainer.TrainJob) { tj.Spec.RuntimeRef.Name = "other" },
			want:   "spec.runtimeRef: Invalid value: runtimeRef is immutable",
		},
		"runtimeRef kind": {
			change: func(tj *trainer.TrainJob) { tj.Spec.RuntimeRef.Kind = ptr.To(trainer.TrainingRuntimeKind) },
			want:   "runtimeRef is immutable",
		},
		"managedBy": {
			change: func(tj *trainer.TrainJob) { tj.Spec.ManagedBy = ptr.To(trainer.MultiKueueControllerName) },
			want:   "managedBy is immutable",
		},
		"activeDeadlineSeconds": {
			change: func(tj *trainer.TrainJob) { tj.Spec.ActiveDeadlineSeconds = ptr.To[int64](7200) },
			want:   "activeDeadlineSeconds is immutable",
		},
		"activeDeadlineSeconds removed, which would let the TrainJob escape it": {
			change: func(tj *trainer.TrainJob) { tj.Spec.ActiveDeadlineSeconds = nil },
			want:   "activeDeadlineSeconds may not be removed once set",
		},
		"activeDeadlineSeconds removed while suspended": {
			change: func(tj *trainer.TrainJob) { tj.Spec.Suspend, tj.Spec.ActiveDeadlineSeconds = ptr.To(true), nil },
			want:   "activeDeadlineSeconds may not be removed once set",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			changed := tj.DeepCopy()
			tc.change(changed)
			err := k8sClient.Update(ctx, changed)
			require.Error(t, err, "the API server accepted a change of an immutable field")
			assert.Contains(t, err.Error(), tc.want)
		})
	}

	t.Run("mutable fields still change", func(t *testing.T) {
		changed := tj.DeepCopy()
		changed.Spec.Suspend = ptr.To(true)
		changed.Spec.Labels = map[string]string{"team": "a"}
		require.NoError(t, k8sClient.Update(ctx, changed))
	})
}

// TestPrinterColumns reads TrainJobs and runtimes the way kubectl get does, as a server-side table.
func TestPrinterColumns(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	rt := utiltesting.TrainingRuntime("torch", ns, utiltesting.MakeRuntimeSpec().NumNodes(3).Torch(&trainer.TorchMLPolicySource{}).Obj())
	rt.Labels = map[string]string{trainer.FrameworkLabel: "torch"}
	require.NoError(t, k8sClient.Create(ctx, rt))
	tj := utiltesting.MakeTrainJob("printed", ns).RuntimeRef(trainer.TrainingRuntimeKind, "torch").NumNodes(4).Obj()
	require.NoError(t, k8sClient.Create(ctx, tj))
	tj.Status.State = trainer.TrainJobFailed
	tj.Status.Conditions = []metav1.Condition{
		{Type: trainer.TrainJobFailed, Status: metav1.ConditionTrue, Reason: "FailedJobs", LastTransitionTime: metav1.Now()},
	}
	tj.Status.Restarts = 2
	tj.Status.Nodes = 3
	tj.Status.Failure = &trainer.PodFailure{Pod: "printed-node-0-0-x", Reason: "OOMKilled", Attempt: 2, Time: metav1.Now()}
	require.NoError(t, k8sClient.Status().Update(ctx, tj))

	cases := map[string]struct {
		resource string
		want     map[string]any
	}{
		"trainjobs": {
			resource: "trainjobs",
			want: map[string]any{"Name": "printed", "State": "Failed", "Runtime": "torch", "Nodes": float64(3),
				"Desired": float64(4), "Restarts": float64(2), "Reason": "OOMKilled"},
		},
		"trainingruntimes": {
			resource: "trainingruntimes",
			want:     map[string]any{"Name": "torch", "Framework": "torch", "Nodes": float64(3)},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			table := getTable(t, ns, tc.resource)
			require.Len(t, table.Rows, 1)
			got := map[string]any{}
			for i, col := range table.ColumnDefinitions {
				if _, ok := tc.want[col.Name]; ok {
					got[col.Name] = table.Rows[0].Cells[i]
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("kubectl get %s columns (-want +got):\n%s", tc.resource, diff)
			}
		})
	}
}

// TestCRDsAreServed checks that the API server serves every kind the operator works with: its
// own and the JobSet and PodGroup ones it creates.
func TestCRDsAreServed(t *testing.T) {
	for _, gvk := range []schema.GroupVersionKind{
		trainer.GroupVersion.WithKind("TrainJob"),
		trainer.GroupVersion.WithKind(trainer.TrainingRuntimeKind),
		trainer.GroupVersion.WithKind(trainer.ClusterTrainingRuntimeKind),
		{Group: "jobset.x-k8s.io", Version: "v1alpha2", Kind: "JobSet"},
		{Group: "scheduling.x-k8s.io", Version: "v1alpha1", Kind: "PodGroup"},
	} {
		_, err := k8sClient.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
		assert.NoErrorf(t, err, "%s is not served", gvk)
	}
}
