package torch

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/pipeline"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/internal/trainingruntime"
)

var rankEnv = corev1.EnvVar{Name: EnvNodeRank, ValueFrom: &corev1.EnvVarSource{
	FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['batch.kubernetes.io/job-completion-index']"},
}}

func resources(cpu string, gpus string) *corev1.ResourceRequirements {
	r := &corev1.ResourceRequirements{Limits: corev1.ResourceList{}}
	if cpu != "" {
		r.Limits[corev1.ResourceCPU] = resource.MustParse(cpu)
	}
	if gpus != "" {
		r.Limits["nvidia.com/gpu"] = resource.MustParse(gpus)
	}
	return r
}

func TestTorch(t *testing.T) {
	tj := func() *utiltesting.TrainJobWrapper { return utiltesting.MakeTrainJob("mnist", "ns") }
	static := func(nodes, procs string) []corev1.EnvVar {
		return []corev1.EnvVar{
			rankEnv,
			{Name: EnvNumNodes, Value: nodes},
			{Name: EnvNumProcPerNode, Value: procs},
			{Name: EnvMasterAddr, Value: "mnist-node-0-0.mnist"},
			{Name: EnvMasterPort, Value: "29400"},
		}
	}
	cases := map[string]struct {
		runtime  trainer.TrainingRuntimeSpec
		trainJob *trainer.TrainJob
		// wantEnv is the trainer container's env; the other cases compare the whole JobSet.
		wantEnv []corev1.EnvVar
		want    func(*trainer.TrainJob, trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet
		wantErr string
	}{
		"two GPU nodes: rendezvous on the first, one process per GPU, port 29400, Indexed ranks": {
			runtime:  utiltesting.MakeRuntimeSpec().NumNodes(2).Torch(&trainer.TorchMLPolicySource{NumProcPerNode: ptr.To(intstr.FromString("auto"))}).Obj(),
			trainJob: tj().Trainer(&trainer.Trainer{ResourcesPerNode: resources("", "4")}).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return utiltesting.MakeJobSet(tj, rt).NumNodes("node", 2).
					ReplicatedJob("node", func(j *jobsetv1alpha2.ReplicatedJob) {
						j.Template.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
					}).
					Container("node", "node", func(c *corev1.Container) {
						c.Resources = *resources("", "4")
						c.Env = static("2", "4")
						c.Ports = []corev1.ContainerPort{{Name: "torchrun", ContainerPort: 29400, Protocol: corev1.ProtocolTCP}}
					}).Obj()
			},
		},
		"the master's address is in the runtime's subdomain when it names one": {
			runtime: func() trainer.TrainingRuntimeSpec {
				rt := utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{NumProcPerNode: ptr.To(intstr.FromInt32(1))}).Obj()
				rt.Template.Spec.Network = &jobsetv1alpha2.Network{Subdomain: "training"}
				return rt
			}(),
			trainJob: tj().Obj(),
			wantEnv: func() []corev1.EnvVar {
				env := static("1", "1")
				env[3].Value = "mnist-node-0-0.training"
				return env
			}(),
		},
		"auto on a CPU-only node is one process per whole CPU of the limit": {
			runtime:  utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{}).Obj(),
			trainJob: tj().Trainer(&trainer.Trainer{ResourcesPerNode: resources("3500m", "")}).Obj(),
			wantEnv:  static("1", "3"),
		},
		"cpu from the request when there is no limit": {
			runtime: func() trainer.TrainingRuntimeSpec {
				rt := utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{NumProcPerNode: ptr.To(intstr.FromString("cpu"))}).Obj()
				rt.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[0].Resources.Requests =
					corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("6")}
				return rt
			}(),
			trainJob: tj().Obj(),
			wantEnv:  static("1", "6"),
		},
		"cpu below one whole CPU is still one process": {
			runtime:  utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{NumProcPerNode: ptr.To(intstr.FromString("cpu"))}).Obj(),
			trainJob: tj().Trainer(&trainer.Trainer{ResourcesPerNode: resources("500m", "")}).Obj(),
			wantEnv:  static("1", "1"),
		},
		"cpu without any CPU resources is one process": {
			runtime:  utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{NumProcPerNode: ptr.To(intstr.FromString("cpu"))}).Obj(),
			trainJob: tj().Obj(),
			wantEnv:  static("1", "1"),
		},
		"gpu counts every resource ending in gpu": {
			runtime: utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{NumProcPerNode: ptr.To(intstr.FromString("gpu"))}).Obj(),
			trainJob: tj().Trainer(&trainer.Trainer{ResourcesPerNode: &corev1.ResourceRequirements{Limits: corev1.ResourceList{
				"amd.com/gpu": resource.MustParse("2"), corev1.ResourceCPU: resource.MustParse("16"),
			}}}).Obj(),
			wantEnv: static("1", "2"),
		},
		"the runtime's gpu on a node the TrainJob gives no GPUs cannot be built, for want of the TrainJob's GPUs": {
			runtime:  utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{NumProcPerNode: ptr.To(intstr.FromString("gpu"))}).Obj(),
			trainJob: tj().Trainer(&trainer.Trainer{ResourcesPerNode: resources("8", "")}).Obj(),
			wantErr:  `spec.trainer.resourcesPerNode: Required value: TrainingRuntime "torch" runs one process per GPU (mlPolicy.torch.numProcPerNode: gpu), and the trainer container "node" has no GPU resource: give the nodes GPUs`,
		},
		"the runtime's gpu with GPUs that come from resource claims asks for a number, which the claims do not say": {
			runtime: utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{NumProcPerNode: ptr.To(intstr.FromString("gpu"))}).Obj(),
			trainJob: tj().Trainer(&trainer.Trainer{ResourceClaimsPerNode: []trainer.TrainerResourceClaim{
				{Name: "gpus", ResourceClaimTemplateName: ptr.To("h100-x8")}}}).Obj(),
			wantErr: `spec.trainer.numProcPerNode: Invalid value: "gpu": one process per GPU, and the trainer container "node" gets its devices from resource claims, whose GPUs the operator does not count (their number is in a ResourceClaimTemplate): set numProcPerNode to a number`,
		},
		"an explicit number is used as is, even with GPUs": {
			runtime:  utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{NumProcPerNode: ptr.To(intstr.FromInt32(3))}).Obj(),
			trainJob: tj().Trainer(&trainer.Trainer{ResourcesPerNode: resources("", "8")}).Obj(),
			wantEnv:  static("1", "3"),
		},
		"the TrainJob's numProcPerNode and numNodes override the runtime's": {
			runtime:  utiltesting.MakeRuntimeSpec().NumNodes(2).Torch(&trainer.TorchMLPolicySource{NumProcPerNode: ptr.To(intstr.FromInt32(3))}).Obj(),
			trainJob: tj().NumNodes(8).NumProcPerNode(intstr.FromString("gpu")).Trainer(&trainer.Trainer{NumNodes: ptr.To[int32](8), NumProcPerNode: ptr.To(intstr.FromString("gpu")), ResourcesPerNode: resources("", "2")}).Obj(),
			wantEnv:  static("8", "2"),
		},
		"a TrainJob's invalid numProcPerNode names the TrainJob's field": {
			runtime:  utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{}).Obj(),
			trainJob: tj().NumProcPerNode(intstr.FromInt32(0)).Obj(),
			wantErr:  `spec.trainer.numProcPerNode: Invalid value: "0": must be auto, cpu, gpu or a positive integer`,
		},
		"elastic runs maxNodes pods with a c10d rendezvous, succeeds with minNodes of them, and the JobSet restarts as torchrun does": {
			runtime: utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{
				NumProcPerNode: ptr.To(intstr.FromInt32(2)),
				ElasticPolicy:  &trainer.TorchElasticPolicy{MinNodes: ptr.To[int32](2), MaxNodes: ptr.To[int32](5), MaxRestarts: ptr.To[int32](3)},
			}).Obj(),
			trainJob: tj().Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				js := utiltesting.MakeJobSet(tj, rt).NumNodes("node", 5).
					ReplicatedJob("node", func(j *jobsetv1alpha2.ReplicatedJob) {
						j.Template.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
						j.Template.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{{SucceededCount: ptr.To[int32](2)}}}
					}).
					Container("node", "node", func(c *corev1.Container) {
						c.Env = []corev1.EnvVar{
							rankEnv,
							{Name: EnvNumNodes, Value: "2:5"},
							{Name: EnvNumProcPerNode, Value: "2"},
							{Name: EnvMasterAddr, Value: "mnist-node-0-0.mnist"},
							{Name: EnvMasterPort, Value: "29400"},
							{Name: EnvRdzvBackend, Value: "c10d"},
							{Name: EnvRdzvEndpoint, Value: "mnist-node-0-0.mnist.ns.svc.cluster.local:29400"},
							{Name: EnvRdzvID, Value: "mnist"},
							{Name: EnvMaxRestarts, Value: "3"},
							// A JobSet that restarts tells the trainer its attempt, and keeps a
							// restart off a node that failed the last attempt.
							{Name: "KUBEFLOW_TRAINER_RESTART_ATTEMPT", ValueFrom: &corev1.EnvVarSource{
								FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['jobset.sigs.k8s.io/restart-attempt']"}}},
						}
						c.Ports = []corev1.ContainerPort{{Name: "torchrun", ContainerPort: 29400, Protocol: corev1.ProtocolTCP}}
					}).
					ReplicatedJob("node", func(j *jobsetv1alpha2.ReplicatedJob) {
						j.Template.Labels = map[string]string{trainer.AvoidNodesLabel: string(trainer.AvoidNodesOnNodeFailures)}
					}).Obj()
				js.Spec.FailurePolicy = &jobsetv1alpha2.FailurePolicy{MaxRestarts: 3}
				return js
			},
		},
		"elastic without maxNodes runs minNodes pods and sets no restarts": {
			runtime: utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{
				NumProcPerNode: ptr.To(intstr.FromInt32(1)),
				ElasticPolicy:  &trainer.TorchElasticPolicy{MinNodes: ptr.To[int32](3)},
			}).Obj(),
			trainJob: tj().Obj(),
			wantEnv: []corev1.EnvVar{
				rankEnv,
				{Name: EnvNumNodes, Value: "3:3"},
				{Name: EnvNumProcPerNode, Value: "1"},
				{Name: EnvMasterAddr, Value: "mnist-node-0-0.mnist"},
				{Name: EnvMasterPort, Value: "29400"},
				{Name: EnvRdzvBackend, Value: "c10d"},
				{Name: EnvRdzvEndpoint, Value: "mnist-node-0-0.mnist.ns.svc.cluster.local:29400"},
				{Name: EnvRdzvID, Value: "mnist"},
			},
		},
		"an elastic TrainJob's numNodes is the size it runs at; the environment names the bounds, and torchrun may restart for scale-downs": {
			runtime: utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{
				NumProcPerNode: ptr.To(intstr.FromInt32(1)),
				ElasticPolicy:  &trainer.TorchElasticPolicy{MinNodes: ptr.To[int32](1), MaxNodes: ptr.To[int32](4)},
			}).Obj(),
			trainJob: tj().NumNodes(2).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return utiltesting.MakeJobSet(tj, rt).NumNodes("node", 2).
					ReplicatedJob("node", func(j *jobsetv1alpha2.ReplicatedJob) {
						j.Template.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)
						j.Template.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{{SucceededCount: ptr.To[int32](1)}}}
					}).
					Container("node", "node", func(c *corev1.Container) {
						c.Env = []corev1.EnvVar{
							rankEnv,
							{Name: EnvNumNodes, Value: "1:4"},
							{Name: EnvNumProcPerNode, Value: "1"},
							{Name: EnvMasterAddr, Value: "mnist-node-0-0.mnist"},
							{Name: EnvMasterPort, Value: "29400"},
							{Name: EnvRdzvBackend, Value: "c10d"},
							{Name: EnvRdzvEndpoint, Value: "mnist-node-0-0.mnist.ns.svc.cluster.local:29400"},
							{Name: EnvRdzvID, Value: "mnist"},
							{Name: EnvMaxRestarts, Value: "3"},
						}
						c.Ports = []corev1.ContainerPort{{Name: "torchrun", ContainerPort: 29400, Protocol: corev1.ProtocolTCP}}
					}).Obj()
			},
		},
		"an elastic TrainJob's pod names are checked at maxNodes, the size it may grow to": {
			runtime: utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{
				ElasticPolicy: &trainer.TorchElasticPolicy{MinNodes: ptr.To[int32](1), MaxNodes: ptr.To[int32](16)},
			}).Obj(),
			trainJob: utiltesting.MakeTrainJob(strings.Repeat("a", 48), "ns").NumNodes(1).Obj(),
			wantErr:  `would get names of 64 characters (such as "` + strings.Repeat("a", 48) + `-node-0-15-abcde")`,
		},
		"an elastic TrainJob's numNodes outside the bounds is refused at the field": {
			runtime: utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{
				ElasticPolicy: &trainer.TorchElasticPolicy{MinNodes: ptr.To[int32](2), MaxNodes: ptr.To[int32](4)},
			}).Obj(),
			trainJob: tj().NumNodes(5).Obj(),
			wantErr:  `spec.trainer.numNodes: Invalid value: 5: TrainingRuntime "torch" is elastic: numNodes must be between its torch.elasticPolicy's minNodes (2) and maxNodes (4)`,
		},
		"addresses use the trainer job's own name": {
			runtime: utiltesting.MakeRuntimeSpec().ReplicatedJobs(utiltesting.ReplicatedJob("worker", trainer.AncestorTrainer, "trainer")).
				Torch(&trainer.TorchMLPolicySource{NumProcPerNode: ptr.To(intstr.FromInt32(1))}).Obj(),
			trainJob: tj().Obj(),
			wantEnv: []corev1.EnvVar{
				rankEnv,
				{Name: EnvNumNodes, Value: "1"},
				{Name: EnvNumProcPerNode, Value: "1"},
				{Name: EnvMasterAddr, Value: "mnist-worker-0-0.mnist"},
				{Name: EnvMasterPort, Value: "29400"},
			},
		},
		"the TrainJob's own env is kept beside torchrun's": {
			runtime:  utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{NumProcPerNode: ptr.To(intstr.FromInt32(1))}).Obj(),
			trainJob: tj().Trainer(&trainer.Trainer{Env: []corev1.EnvVar{{Name: "NCCL_DEBUG", Value: "INFO"}}}).Obj(),
			wantEnv:  append([]corev1.EnvVar{{Name: "NCCL_DEBUG", Value: "INFO"}}, static("1", "1")...),
		},
		"a TrainJob that sets PET_NNODES by hand cannot be built": {
			runtime:  utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{}).Obj(),
			trainJob: tj().Trainer(&trainer.Trainer{Env: []corev1.EnvVar{{Name: EnvNumNodes, Value: "9"}}}).Obj(),
			wantErr:  "spec.trainer.env[0].name: Forbidden: PET_NNODES is set by the torch framework and may not be set by hand",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rt := &trainingruntime.Runtime{Kind: trainer.TrainingRuntimeKind, Name: "torch", Spec: &tc.runtime}
			children, err := pipeline.Build(tc.trainJob, rt, New(""))
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			got := utiltesting.FromApplyConfiguration[jobsetv1alpha2.JobSet](t, children.JobSet)
			if tc.want != nil {
				if diff := cmp.Diff(tc.want(tc.trainJob, tc.runtime), got); diff != "" {
					t.Errorf("JobSet (-want +got):\n%s", diff)
				}
				return
			}
			if diff := cmp.Diff(tc.wantEnv, got.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[0].Env); diff != "" {
				t.Errorf("trainer env (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEnvInjection(t *testing.T) {
	// runtime has a trainer job "node" with a sidecar "monitor" and an init container "wait-for-data",
	// and a job "evaluator" with containers "eval" and "logs".
	runtime := func(policy trainer.TorchMLPolicySource, change ...func(node, evaluator *corev1.PodSpec)) trainer.TrainingRuntimeSpec {
		node := utiltesting.ReplicatedJob("node", trainer.AncestorTrainer, "node")
		node.Template.Spec.Template.Spec.Containers = append(node.Template.Spec.Template.Spec.Containers, corev1.Container{Name: "monitor"})
		node.Template.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: "wait-for-data"}}
		evaluator := utiltesting.ReplicatedJob("evaluator", "", "eval")
		evaluator.Template.Spec.Template.Spec.Containers = append(evaluator.Template.Spec.Template.Spec.Containers, corev1.Container{Name: "logs"})
		for _, c := range change {
			c(&node.Template.Spec.Template.Spec, &evaluator.Template.Spec.Template.Spec)
		}
		policy.NumProcPerNode = ptr.To(intstr.FromInt32(1))
		return utiltesting.MakeRuntimeSpec().NumNodes(2).ReplicatedJobs(node, evaluator).Torch(&policy).Obj()
	}
	inject := func(targets ...trainer.EnvInjectionTarget) trainer.TorchMLPolicySource {
		return trainer.TorchMLPolicySource{EnvInjection: &trainer.EnvInjection{Targets: targets}}
	}
	target := func(job string, containers ...string) trainer.EnvInjectionTarget {
		return trainer.EnvInjectionTarget{JobName: job, ContainerNames: containers}
	}
	static := []corev1.EnvVar{
		rankEnv,
		{Name: EnvNumNodes, Value: "2"},
		{Name: EnvNumProcPerNode, Value: "1"},
		{Name: EnvMasterAddr, Value: "mnist-node-0-0.mnist"},
		{Name: EnvMasterPort, Value: "29400"},
	}
	tj := func() *utiltesting.TrainJobWrapper { return utiltesting.MakeTrainJob("mnist", "ns") }

	cases := map[string]struct {
		runtime  trainer.TrainingRuntimeSpec
		trainJob *trainer.TrainJob
		// wantEnv is the env of each container, by job and container name; "init:" marks an init
		// container.
		wantEnv map[string][]corev1.EnvVar
		wantErr string
	}{
		"by default only the trainer container gets torchrun's env": {
			runtime:  runtime(trainer.TorchMLPolicySource{}),
			trainJob: tj().Obj(),
			wantEnv:  map[string][]corev1.EnvVar{"node/node": static, "node/monitor": nil, "node/init:wait-for-data": nil, "evaluator/eval": nil, "evaluator/logs": nil},
		},
		"the named containers, init containers and another job's containers get the trainer's env": {
			runtime:  runtime(inject(target("node", "monitor", "wait-for-data"), target("evaluator", "eval"))),
			trainJob: tj().Obj(),
			wantEnv:  map[string][]corev1.EnvVar{"node/node": static, "node/monitor": static, "node/init:wait-for-data": static, "evaluator/eval": static, "evaluator/logs": nil},
		},
		"a target's own env is kept beside torchrun's": {
			runtime: runtime(inject(target("evaluator", "eval")), func(_, evaluator *corev1.PodSpec) {
				evaluator.Containers[0].Env = []corev1.EnvVar{{Name: "MODE", Value: "eval"}}
			}),
			trainJob: tj().Obj(),
			wantEnv:  map[string][]corev1.EnvVar{"evaluator/eval": append([]corev1.EnvVar{{Name: "MODE", Value: "eval"}}, static...)},
		},
		"naming the trainer container changes nothing": {
			runtime:  runtime(inject(target("node", "node"))),
			trainJob: tj().Obj(),
			wantEnv:  map[string][]corev1.EnvVar{"node/node": static, "node/monitor": nil},
		},
		"an elastic runtime's targets get the rendezvous too": {
			runtime: runtime(trainer.TorchMLPolicySource{
				ElasticPolicy: &trainer.TorchElasticPolicy{MinNodes: ptr.To[int32](1), MaxNodes: ptr.To[int32](3)},
				EnvInjection:  &trainer.EnvInjection{Targets: []trainer.EnvInjectionTarget{target("evaluator", "eval")}},
			}),
			trainJob: tj().Obj(),
			wantEnv: func() map[string][]corev1.EnvVar {
				env := []corev1.EnvVar{
					rankEnv,
					{Name: EnvNumNodes, Value: "1:3"},
					{Name: EnvNumProcPerNode, Value: "1"},
					{Name: EnvMasterAddr, Value: "mnist-node-0-0.mnist"},
					{Name: EnvMasterPort, Value: "29400"},
					{Name: EnvRdzvBackend, Value: "c10d"},
					{Name: EnvRdzvEndpoint, Value: "mnist-node-0-0.mnist.ns.svc.cluster.local:29400"},
					{Name: EnvRdzvID, Value: "mnist"},
					{Name: EnvMaxRestarts, Value: "3"},
				}
				return map[string][]corev1.EnvVar{"node/node": env, "evaluator/eval": env}
			}(),
		},
		"a target job the runtime lacks is the runtime's error": {
			runtime:  runtime(inject(target("node", "monitor"), target("launcher", "main"))),
			trainJob: tj().Obj(),
			wantErr:  `TrainingRuntime "torch": spec.mlPolicy.torch.envInjection.targets[1].jobName: Invalid value: "launcher": the runtime's template has no replicated job of that name`,
		},
		"a target container the job lacks is the runtime's error": {
			runtime:  runtime(inject(target("evaluator", "eval", "node"))),
			trainJob: tj().Obj(),
			wantErr:  `TrainingRuntime "torch": spec.mlPolicy.torch.envInjection.targets[0].containerNames[1]: Invalid value: "node": replicated job "evaluator" has no container or init container of that name`,
		},
		"a target init container of the runtime that sets torchrun's env by hand": {
			runtime: runtime(inject(target("node", "wait-for-data")), func(node, _ *corev1.PodSpec) {
				node.InitContainers[0].Env = []corev1.EnvVar{{Name: EnvMasterAddr, Value: "elsewhere"}}
			}),
			trainJob: tj().Obj(),
			wantErr:  `TrainingRuntime "torch": spec.template.spec.replicatedJobs[0].template.spec.template.spec.initContainers[0].env[0].name: Forbidden: PET_MASTER_ADDR is set by the torch framework and may not be set by hand`,
		},
		"a TrainJob that sets torchrun's env in a target container by hand": {
			runtime: runtime(inject(target("evaluator", "logs"))),
			trainJob: tj().PodSpecOverrides(trainer.PodSpecOverride{TargetJobs: []string{"evaluator"}, PodSpecPatch: trainer.PodSpecPatch{
				Containers: []trainer.ContainerPatch{{Name: "eval", Env: []corev1.EnvVar{{Name: EnvNumNodes, Value: "1"}}}, {Name: "logs", Env: []corev1.EnvVar{{Name: EnvNumNodes, Value: "1"}}}},
			}}).Obj(),
			wantErr: "spec.podSpecOverrides[0].containers[1].env[0].name: Forbidden: PET_NNODES is set by the torch framework and may not be set by hand",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rt := &trainingruntime.Runtime{Kind: trainer.TrainingRuntimeKind, Name: "torch", Spec: &tc.runtime}
			children, err := pipeline.Build(tc.trainJob, rt, New(""))
			if tc.wantErr != "" {
				require.EqualError(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			js := utiltesting.FromApplyConfiguration[jobsetv1alpha2.JobSet](t, children.JobSet)
			got := map[string][]corev1.EnvVar{}
			for _, job := range js.Spec.ReplicatedJobs {
				for _, c := range job.Template.Spec.Template.Spec.Containers {
					got[job.Name+"/"+c.Name] = c.Env
				}
				for _, c := range job.Template.Spec.Template.Spec.InitContainers {
					got[job.Name+"/init:"+c.Name] = c.Env
				}
			}
			for container, want := range tc.wantEnv {
				if diff := cmp.Diff(want, got[container]); diff != "" {
					t.Errorf("%s env (-want +got):\n%s", container, diff)
				}
			}
		})
	}
}

// TestElasticRendezvousIsOnTheFirstPodsFullName checks that the c10d endpoint is the first pod's
// fully qualified name in the cluster's domain: torchrun hosts the store on the pod whose
// /etc/hosts name equals it, and on no pod for any shorter name.
func TestElasticRendezvousIsOnTheFirstPodsFullName(t *testing.T) {
	spec := utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{
		ElasticPolicy: &trainer.TorchElasticPolicy{MinNodes: ptr.To[int32](1), MaxNodes: ptr.To[int32](2)},
	}).Obj()
	rt := &trainingruntime.Runtime{Kind: trainer.TrainingRuntimeKind, Name: "torch", Spec: &spec}
	children, err := pipeline.Build(utiltesting.MakeTrainJob("mnist", "team-a").Obj(), rt, New("corp.example"))
	require.NoError(t, err)
	js := utiltesting.FromApplyConfiguration[jobsetv1alpha2.JobSet](t, children.JobSet)
	assert.Contains(t, js.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[0].Env,
		corev1.EnvVar{Name: EnvRdzvEndpoint, Value: "mnist-node-0-0.mnist.team-a.svc.corp.example:29400"})
}
