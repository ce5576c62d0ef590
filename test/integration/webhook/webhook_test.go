package webhook

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

func env(pairs ...string) []corev1.EnvVar {
	var vars []corev1.EnvVar
	for i := 0; i < len(pairs); i += 2 {
		vars = append(vars, corev1.EnvVar{Name: pairs[i], Value: pairs[i+1]})
	}
	return vars
}

// withEnv sets the env of a replicated job's first container.
func withEnv(job jobsetv1alpha2.ReplicatedJob, vars ...string) jobsetv1alpha2.ReplicatedJob {
	job = *job.DeepCopy()
	job.Template.Spec.Template.Spec.Containers[0].Env = env(vars...)
	return job
}

// withPriority sets the priority class of a replicated job's pods.
func withPriority(job jobsetv1alpha2.ReplicatedJob, class string) jobsetv1alpha2.ReplicatedJob {
	job = *job.DeepCopy()
	job.Template.Spec.Template.Spec.PriorityClassName = class
	return job
}

func override(o trainer.PodSpecOverride) []trainer.PodSpecOverride {
	return []trainer.PodSpecOverride{o}
}

func mpiJobs(launcherName string, nodeContainer string) []jobsetv1alpha2.ReplicatedJob {
	return []jobsetv1alpha2.ReplicatedJob{
		utiltesting.ReplicatedJob(launcherName, trainer.AncestorTrainer, "node"),
		utiltesting.ReplicatedJob("node", "", nodeContainer),
	}
}

// TestInvalidObjectsAreRejected creates each object as kubectl would and expects the API server,
// through the webhooks or the schema, to refuse it with every wanted fragment in the error: the
// field path and the reason.
func TestInvalidObjectsAreRejected(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	elastic := utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{
		ElasticPolicy: &trainer.TorchElasticPolicy{MinNodes: ptr.To[int32](1), MaxNodes: ptr.To[int32](4)},
	}).Obj()
	require.NoError(t, k8sClient.Create(ctx, utiltesting.TrainingRuntime("elastic", ns, elastic)))
	twoCPUs := utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{}).Obj()
	twoCPUs.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}
	require.NoError(t, k8sClient.Create(ctx, utiltesting.TrainingRuntime("two-cpus", ns, twoCPUs)))
	// injected gives its sidecar "profiler" torchrun's env too.
	injected := utiltesting.ReplicatedJob("node", trainer.AncestorTrainer, "node")
	injected.Template.Spec.Template.Spec.Containers = append(injected.Template.Spec.Template.Spec.Containers, corev1.Container{Name: "profiler", Image: "busybox"})
	require.NoError(t, k8sClient.Create(ctx, utiltesting.TrainingRuntime("injected", ns, utiltesting.MakeRuntimeSpec().ReplicatedJobs(injected).
		Torch(&trainer.TorchMLPolicySource{EnvInjection: &trainer.EnvInjection{Targets: []trainer.EnvInjectionTarget{{JobName: "node", ContainerNames: []string{"profiler"}}}}}).Obj())))

	// tj is a TrainJob of a shipped ClusterTrainingRuntime.
	tj := func(runtime string) *trainer.TrainJob {
		o := utiltesting.MakeTrainJob("job", ns).Obj()
		o.Spec.RuntimeRef.Name = runtime
		return o
	}
	tjWith := func(runtime string, change func(*trainer.TrainJob)) *trainer.TrainJob {
		o := tj(runtime)
		change(o)
		return o
	}
	rt := func(name string, spec *utiltesting.RuntimeSpecWrapper) client.Object {
		return utiltesting.TrainingRuntime(name, ns, spec.Obj())
	}
	ctr := func(spec *utiltesting.RuntimeSpecWrapper) client.Object {
		return utiltesting.ClusterTrainingRuntime("bad-"+ns, spec.Obj())
	}
	node := utiltesting.ReplicatedJob("node", trainer.AncestorTrainer, "node")
	noGPUs := &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}}

	cases := []struct {
		name string
		obj  client.Object
		want []string
	}{
		// TrainJobs that do not fit their runtime: rejected by the TrainJob webhook.
		{"override of a job the runtime lacks", tjWith("torch-distributed", func(o *trainer.TrainJob) {
			o.Spec.PodSpecOverrides = override(trainer.PodSpecOverride{TargetJobs: []string{"launcher"}})
		}), []string{`spec.podSpecOverrides[0].targetJobs[0]: Invalid value: "launcher"`, `ClusterTrainingRuntime "torch-distributed" has no replicated job of that name`}},
		{"second override target the runtime lacks", tjWith("torch-distributed", func(o *trainer.TrainJob) {
			o.Spec.PodSpecOverrides = override(trainer.PodSpecOverride{TargetJobs: []string{"node", "worker"}})
		}), []string{`spec.podSpecOverrides[0].targetJobs[1]: Invalid value: "worker"`}},
		{"override of a container the job lacks", tjWith("torch-distributed", func(o *trainer.TrainJob) {
			o.Spec.PodSpecOverrides = override(trainer.PodSpecOverride{PodSpecPatch: trainer.PodSpecPatch{Containers: []trainer.ContainerPatch{{Name: "sidecar"}}}})
		}), []string{`spec.podSpecOverrides[0].containers[0].name: Invalid value: "sidecar"`, `replicated job "node" of ClusterTrainingRuntime "torch-distributed" has no container of that name`}},
		{"override of an init container the job lacks", tjWith("torch-distributed", func(o *trainer.TrainJob) {
			o.Spec.PodSpecOverrides = override(trainer.PodSpecOverride{PodSpecPatch: trainer.PodSpecPatch{InitContainers: []trainer.ContainerPatch{{Name: "fetch"}}}})
		}), []string{`spec.podSpecOverrides[0].initContainers[0].name: Invalid value: "fetch"`, "has no init container of that name"}},
		{"a device claim for a container the node pods lack", tjWith("torch-distributed", func(o *trainer.TrainJob) {
			o.Spec.Trainer = &trainer.Trainer{ResourceClaimsPerNode: []trainer.TrainerResourceClaim{
				{Name: "gpus", ResourceClaimTemplateName: ptr.To("h100-x8"), ContainerNames: []string{"preprocessor"}}}}
		}), []string{`spec.trainer.resourceClaimsPerNode[0].containerNames[0]: Invalid value: "preprocessor"`, `the node pods of replicated job "node" of ClusterTrainingRuntime "torch-distributed" have no container or init container of that name`}},
		{"a resourcesPerNode claim the pods lack", tjWith("torch-distributed", func(o *trainer.TrainJob) {
			o.Spec.Trainer = &trainer.Trainer{ResourcesPerNode: &corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpus"}}}}
		}), []string{`spec.trainer.resourcesPerNode.claims[0].name: Invalid value: "gpus"`, `uses resource claim "gpus", which its pods do not have`}},
		{"a pod override's claim of neither a claim nor a template", tjWith("torch-distributed", func(o *trainer.TrainJob) {
			o.Spec.PodSpecOverrides = override(trainer.PodSpecOverride{PodSpecPatch: trainer.PodSpecPatch{ResourceClaims: []corev1.PodResourceClaim{{Name: "gpus"}}}})
		}), []string{`spec.podSpecOverrides[0].resourceClaims[0]: Invalid value: "gpus": exactly one of resourceClaimName and resourceClaimTemplateName must be set`}},
		{"torch env set by hand", tjWith("torch-distributed", func(o *trainer.TrainJob) {
			o.Spec.Trainer = &trainer.Trainer{Env: env("EPOCHS", "3", "PET_NNODES", "8")}
		}), []string{"spec.trainer.env[1].name: Forbidden: PET_NNODES is set by the torch framework and may not be set by hand"}},
		{"torch env set by an override of the trainer container", tjWith("torch-distributed", func(o *trainer.TrainJob) {
			o.Spec.PodSpecOverrides = override(trainer.PodSpecOverride{PodSpecPatch: trainer.PodSpecPatch{Containers: []trainer.ContainerPatch{{Name: "node", Env: env("PET_MASTER_ADDR", "x")}}}})
		}), []string{"spec.podSpecOverrides[0].containers[0].env[0].name: Forbidden: PET_MASTER_ADDR is set by the torch framework"}},
		{"torch env set by an override of a container the runtime injects it into", func() client.Object {
			return utiltesting.MakeTrainJob("job", ns).RuntimeRef(trainer.TrainingRuntimeKind, "injected").PodSpecOverrides(trainer.PodSpecOverride{
				PodSpecPatch: trainer.PodSpecPatch{Containers: []trainer.ContainerPatch{{Name: "profiler", Env: env("PET_NODE_RANK", "0")}}},
			}).Obj()
		}(), []string{"spec.podSpecOverrides[0].containers[0].env[0].name: Forbidden: PET_NODE_RANK is set by the torch framework"}},
		{"the progress endpoint's env set by hand", tjWith("torch-distributed", func(o *trainer.TrainJob) {
			o.Spec.Trainer = &trainer.Trainer{Env: env("KUBEFLOW_TRAINER_SERVER_TOKEN", "/tmp/mine")}
		}), []string{"spec.trainer.env[0].name: Forbidden: KUBEFLOW_TRAINER_SERVER_TOKEN is set by the operator (for progress reports) and may not be set by hand"}},
		{"a resourcesPerNode limit below the runtime's request", func() *trainer.TrainJob {
			o := utiltesting.MakeTrainJob("job", ns).RuntimeRef(trainer.TrainingRuntimeKind, "two-cpus").Obj()
			o.Spec.Trainer = &trainer.Trainer{ResourcesPerNode: &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}
			return o
		}(), []string{`spec.trainer.resourcesPerNode.limits[cpu]: Invalid value: "1": the cpu request of container "node" (2) would be above its limit (1)`}},
		{"xgboost env set by hand", tjWith("xgboost-distributed", func(o *trainer.TrainJob) {
			o.Spec.Trainer = &trainer.Trainer{Env: env("DMLC_NUM_WORKER", "2")}
		}), []string{"spec.trainer.env[0].name: Forbidden: DMLC_NUM_WORKER is set by the xgboost framework"}},
		{"xgboost env set by an override", tjWith("xgboost-distributed", func(o *trainer.TrainJob) {
			o.Spec.PodSpecOverrides = override(trainer.PodSpecOverride{TargetJobs: []string{"node"}, PodSpecPatch: trainer.PodSpecPatch{Containers: []trainer.ContainerPatch{{Name: "node", Env: env("DMLC_TASK_ID", "0")}}}})
		}), []string{"spec.podSpecOverrides[0].containers[0].env[0].name: Forbidden: DMLC_TASK_ID is set by the xgboost framework"}},
		{"every error at once", tjWith("torch-distributed", func(o *trainer.TrainJob) {
			o.Spec.Trainer = &trainer.Trainer{Env: env("PET_NNODES", "8")}
			o.Spec.PodSpecOverrides = []trainer.PodSpecOverride{{TargetJobs: []string{"launcher"}}, {TargetJobs: []string{"worker"}}}
		}), []string{`is invalid: [spec.trainer.env[0].name: Forbidden: PET_NNODES is set by the torch framework`,
			`spec.podSpecOverrides[0].targetJobs[0]: Invalid value: "launcher"`, `spec.podSpecOverrides[1].targetJobs[0]: Invalid value: "worker"`}},
		{"processes per node for jax, which runs one per node, and a patch of a job jax lacks", tjWith("jax-distributed", func(o *trainer.TrainJob) {
			o.Spec.Trainer = &trainer.Trainer{NumProcPerNode: ptr.To(intstr.FromInt32(4))}
			o.Spec.RuntimePatches = []trainer.RuntimePatch{utiltesting.JobPatch("me", utiltesting.PodPatch("launcher", nil, nil))}
		}), []string{`spec.trainer.numProcPerNode: Forbidden: ClusterTrainingRuntime "jax-distributed" runs the jax framework, which does not use it (torch, mpi and flux do)`,
			`spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].name: Invalid value: "launcher"`}},
		{"jax env set by hand", tjWith("jax-distributed", func(o *trainer.TrainJob) {
			o.Spec.Trainer = &trainer.Trainer{Env: env("JAX_PROCESS_ID", "0")}
		}), []string{"spec.trainer.env[0].name: Forbidden: JAX_PROCESS_ID is set by the jax framework"}},
		{"jax env set by an override", tjWith("jax-distributed", func(o *trainer.TrainJob) {
			o.Spec.PodSpecOverrides = override(trainer.PodSpecOverride{PodSpecPatch: trainer.PodSpecPatch{Containers: []trainer.ContainerPatch{{Name: "node", Env: env("JAX_COORDINATOR_ADDRESS", "x")}}}})
		}), []string{"spec.podSpecOverrides[0].containers[0].env[0].name: Forbidden: JAX_COORDINATOR_ADDRESS is set by the jax framework"}},
		{"OpenMPI hostfile variable set by hand", tjWith("mpi-distributed", func(o *trainer.TrainJob) {
			o.Spec.Trainer = &trainer.Trainer{Env: env("OMPI_MCA_orte_default_hostfile", "/tmp/hosts")}
		}), []string{"spec.trainer.env[0].name: Forbidden: OMPI_MCA_orte_default_hostfile is set by the mpi framework"}},
		{"another MPI's hostfile variable set by hand", tjWith("mpi-distributed", func(o *trainer.TrainJob) {
			o.Spec.Trainer = &trainer.Trainer{Env: env("I_MPI_HYDRA_HOST_FILE", "/tmp/hosts")}
		}), []string{"spec.trainer.env[0].name: Forbidden: I_MPI_HYDRA_HOST_FILE is set by the mpi framework"}},
		{"dataset initializer for a runtime without one", tjWith("torch-distributed", func(o *trainer.TrainJob) {
			o.Spec.Initializer = &trainer.Initializer{Dataset: &trainer.DatasetInitializer{StorageUri: ptr.To("hf://d")}}
		}), []string{`spec.initializer.dataset: Forbidden: ClusterTrainingRuntime "torch-distributed" has no dataset-initializer`}},
		{"model initializer for a runtime without one", tjWith("jax-distributed", func(o *trainer.TrainJob) {
			o.Spec.Initializer = &trainer.Initializer{Model: &trainer.ModelInitializer{StorageUri: ptr.To("hf://m")}}
		}), []string{`spec.initializer.model: Forbidden: ClusterTrainingRuntime "jax-distributed" has no model-initializer`}},
		{"gpu processes on nodes without GPUs", tjWith("torch-distributed", func(o *trainer.TrainJob) {
			o.Spec.Trainer = &trainer.Trainer{NumProcPerNode: ptr.To(intstr.FromString("gpu")), ResourcesPerNode: noGPUs}
		}), []string{`spec.trainer.numProcPerNode: Invalid value: "gpu": the trainer container "node" has no GPU resource`}},
		{"auto MPI slots", tjWith("mpi-distributed", func(o *trainer.TrainJob) {
			o.Spec.Trainer = &trainer.Trainer{NumProcPerNode: ptr.To(intstr.FromString("auto"))}
		}), []string{`spec.trainer.numProcPerNode: Invalid value: "auto": MPI needs a positive integer`}},
		{"cpu MPI slots", tjWith("mpi-distributed", func(o *trainer.TrainJob) {
			o.Spec.Trainer = &trainer.Trainer{NumProcPerNode: ptr.To(intstr.FromString("cpu"))}
		}), []string{`spec.trainer.numProcPerNode: Invalid value: "cpu": MPI needs a positive integer`}},
		{"gpu MPI slots", tjWith("mpi-distributed", func(o *trainer.TrainJob) {
			o.Spec.Trainer = &trainer.Trainer{NumProcPerNode: ptr.To(intstr.FromString("gpu"))}
		}), []string{`spec.trainer.numProcPerNode: Invalid value: "gpu": MPI needs a positive integer`}},
		{"auto Flux tasks", tjWith("flux-distributed", func(o *trainer.TrainJob) {
			o.Spec.Trainer = &trainer.Trainer{NumProcPerNode: ptr.To(intstr.FromString("auto"))}
		}), []string{`spec.trainer.numProcPerNode: Invalid value: "auto": Flux needs a positive integer: the tasks per node`}},
		{"Flux's installer patched by an override", tjWith("flux-distributed", func(o *trainer.TrainJob) {
			o.Spec.PodSpecOverrides = override(trainer.PodSpecOverride{PodSpecPatch: trainer.PodSpecPatch{InitContainers: []trainer.ContainerPatch{{Name: "flux-installer", Env: env("A", "1")}}}})
		}), []string{"spec.podSpecOverrides[0].initContainers[0].name: Forbidden: the flux framework adds an init container named flux-installer to the trainer's pods"}},
		{"Flux's volume replaced by an override", tjWith("flux-distributed", func(o *trainer.TrainJob) {
			o.Spec.PodSpecOverrides = override(trainer.PodSpecOverride{PodSpecPatch: trainer.PodSpecPatch{Volumes: []corev1.Volume{{Name: "flux-curve", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}}})
		}), []string{"spec.podSpecOverrides[0].volumes[0].name: Forbidden: the flux framework adds a volume named flux-curve to the trainer's pods"}},
		{"a Flux queue policy Fluxion lacks", tjWith("flux-distributed", func(o *trainer.TrainJob) {
			o.Spec.Trainer = &trainer.Trainer{Env: env("FLUX_QUEUE_POLICY", "lifo")}
		}), []string{`spec.trainer.env[0].value: Unsupported value: "lifo": supported values: "fcfs", "easy", "hybrid", "conservative"`}},
		{"numNodes beyond an elastic runtime's maxNodes", func() client.Object {
			o := utiltesting.MakeTrainJob("job", ns).RuntimeRef(trainer.TrainingRuntimeKind, "elastic").NumNodes(5).Obj()
			return o
		}(), []string{`spec.trainer.numNodes: Invalid value: 5: TrainingRuntime "elastic" is elastic: numNodes must be between its torch.elasticPolicy's minNodes (1) and maxNodes (4)`}},

		// TrainJobs the schema refuses, before the webhook.
		{"a name that is not a DNS-1035 label", func() client.Object { o := tj("torch-distributed"); o.Name = "9lives"; return o }(),
			[]string{"metadata.name must be a DNS-1035 label"}},
		{"zero nodes", tjWith("torch-distributed", func(o *trainer.TrainJob) { o.Spec.Trainer = &trainer.Trainer{NumNodes: ptr.To[int32](0)} }),
			[]string{"spec.trainer.numNodes", "greater than or equal to 1"}},
		{"a storageUri without a scheme", tjWith("torch-distributed", func(o *trainer.TrainJob) {
			o.Spec.Initializer = &trainer.Initializer{Dataset: &trainer.DatasetInitializer{StorageUri: ptr.To("datasets/mnist")}}
		}), []string{"spec.initializer.dataset.storageUri", "storageUri must be empty, an absolute path, or have the form scheme://path"}},
		{"an unknown runtime kind", tjWith("torch-distributed", func(o *trainer.TrainJob) { o.Spec.RuntimeRef.Kind = ptr.To("Runtime") }),
			[]string{"spec.runtimeRef.kind", `Unsupported value: "Runtime"`}},
		{"an unknown manager", tjWith("torch-distributed", func(o *trainer.TrainJob) { o.Spec.ManagedBy = ptr.To("me") }),
			[]string{"spec.managedBy", `Unsupported value: "me"`}},
		{"annotations that make a JobSet etcd cannot store", tjWith("mpi-distributed", func(o *trainer.TrainJob) {
			o.Spec.Annotations = map[string]string{"notes": strings.Repeat("x", 250<<10)}
		}), []string{`spec.annotations: Invalid value: "250 KiB": the JobSet would hold`}},

		// Runtimes no TrainJob could be built from: rejected by the runtime webhooks.
		{"a runtime without a trainer job", rt("r1", utiltesting.MakeRuntimeSpec().ReplicatedJobs(utiltesting.ReplicatedJob("node", "", "node"))),
			[]string{"spec.template.spec.replicatedJobs: Required value: the Job template or pod template of one replicated job must be labelled trainer.kubeflow.org/trainjob-ancestor-step=trainer"}},
		{"a runtime with two trainer jobs", rt("r2", utiltesting.MakeRuntimeSpec().ReplicatedJobs(node, utiltesting.ReplicatedJob("extra", trainer.AncestorTrainer, "node"))),
			[]string{`spec.template.spec.replicatedJobs[1].template.spec.template.metadata.labels: Invalid value: "trainer.kubeflow.org/trainjob-ancestor-step=trainer": only one replicated job may run the trainer`}},
		{"a trainer job without a trainer container", rt("r3", utiltesting.MakeRuntimeSpec().ReplicatedJobs(utiltesting.ReplicatedJob("node", trainer.AncestorTrainer, "main"))),
			[]string{`spec.template.spec.replicatedJobs[0].template.spec.template.spec.containers: Required value: the trainer job "node" needs a container named "node" or "trainer"`}},
		{"a torch runtime that sets torchrun's env", rt("r4", utiltesting.MakeRuntimeSpec().ReplicatedJobs(withEnv(node, "PET_NNODES", "2")).Torch(&trainer.TorchMLPolicySource{})),
			[]string{"spec.template.spec.replicatedJobs[0].template.spec.template.spec.containers[0].env[0].name: Forbidden: PET_NNODES is set by the torch framework"}},
		{"an xgboost runtime that sets the tracker", rt("r5", utiltesting.MakeRuntimeSpec().ReplicatedJobs(withEnv(node, "A", "1", "DMLC_TRACKER_URI", "x")).XGBoost(&trainer.XGBoostMLPolicySource{})),
			[]string{"spec.template.spec.replicatedJobs[0].template.spec.template.spec.containers[0].env[1].name: Forbidden: DMLC_TRACKER_URI is set by the xgboost framework"}},
		{"a jax runtime that sets the process count", rt("r6", utiltesting.MakeRuntimeSpec().ReplicatedJobs(withEnv(node, "JAX_NUM_PROCESSES", "2")).JAX()),
			[]string{"containers[0].env[0].name: Forbidden: JAX_NUM_PROCESSES is set by the jax framework"}},
		{"an MPI runtime without a node job", rt("r7", utiltesting.MakeRuntimeSpec().ReplicatedJobs(utiltesting.ReplicatedJob("launcher", trainer.AncestorTrainer, "node")).MPI(&trainer.MPIMLPolicySource{})),
			[]string{`spec.template.spec.replicatedJobs: Required value: MPI runs its processes on the pods of a replicated job named "node"`}},
		{"an MPI node job without its sshd container", rt("r8", utiltesting.MakeRuntimeSpec().ReplicatedJobs(mpiJobs("launcher", "sshd")...).MPI(&trainer.MPIMLPolicySource{})),
			[]string{`spec.template.spec.replicatedJobs[1].template.spec.template.spec.containers: Required value: the node job needs a container named "node" to run sshd`}},
		{"an MPI launcher named node", rt("r9", utiltesting.MakeRuntimeSpec().ReplicatedJobs(utiltesting.ReplicatedJob("node", trainer.AncestorTrainer, "node")).MPI(&trainer.MPIMLPolicySource{})),
			[]string{`spec.template.spec.replicatedJobs[0].name: Invalid value: "node": the MPI launcher`}},
		{"an MPI launcher that sets a hostfile variable", rt("r10", utiltesting.MakeRuntimeSpec().ReplicatedJobs(withEnv(mpiJobs("launcher", "node")[0], "HYDRA_HOST_FILE", "x"), mpiJobs("launcher", "node")[1]).MPI(&trainer.MPIMLPolicySource{})),
			[]string{"spec.template.spec.replicatedJobs[0].template.spec.template.spec.containers[0].env[0].name: Forbidden: HYDRA_HOST_FILE is set by the mpi framework"}},
		{"a Flux runtime with an init container of the installer's name", rt("r18", utiltesting.MakeRuntimeSpec().ReplicatedJobs(func() jobsetv1alpha2.ReplicatedJob {
			job := *node.DeepCopy()
			job.Template.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: "flux-installer", Image: "mine"}}
			return job
		}()).Flux(&trainer.FluxMLPolicySource{})),
			[]string{`TrainingRuntime.trainer.kubeflow.org "r18" is invalid: spec.template.spec.replicatedJobs[0].template.spec.template.spec.initContainers[0].name: Forbidden: the flux framework adds an init container named flux-installer`}},
		{"a cluster runtime without a trainer job", ctr(utiltesting.MakeRuntimeSpec().ReplicatedJobs(utiltesting.ReplicatedJob("node", "", "node"))),
			[]string{`ClusterTrainingRuntime.trainer.kubeflow.org "bad-` + ns + `" is invalid: spec.template.spec.replicatedJobs: Required value`}},
		{"a cluster MPI runtime without a node job", ctr(utiltesting.MakeRuntimeSpec().ReplicatedJobs(utiltesting.ReplicatedJob("launcher", trainer.AncestorTrainer, "node")).MPI(&trainer.MPIMLPolicySource{})),
			[]string{`spec.template.spec.replicatedJobs: Required value: MPI runs its processes on the pods of a replicated job named "node"`}},
		{"a cluster torch runtime that sets torchrun's env", ctr(utiltesting.MakeRuntimeSpec().ReplicatedJobs(withEnv(node, "PET_MASTER_PORT", "1")).Torch(&trainer.TorchMLPolicySource{})),
			[]string{"containers[0].env[0].name: Forbidden: PET_MASTER_PORT is set by the torch framework"}},
		{"an elastic torch runtime under Kubernetes' own gang scheduling, which could never resize it", rt("r16", utiltesting.MakeRuntimeSpec().
			Torch(&trainer.TorchMLPolicySource{ElasticPolicy: &trainer.TorchElasticPolicy{MinNodes: ptr.To[int32](1), MaxNodes: ptr.To[int32](4)}}).
			PodGroupPolicy(trainer.PodGroupPolicySource{Workload: &trainer.WorkloadPodGroupPolicySource{}})),
			[]string{`TrainingRuntime.trainer.kubeflow.org "r16" is invalid: spec.podGroupPolicy.workload: Forbidden: Kubernetes' own gang scheduling cannot run an elastic training (mlPolicy.torch.elasticPolicy, minNodes below maxNodes): Kubernetes refuses to change the parallelism of a Job whose pods belong to a gang`}},
		{"a torch runtime that injects torchrun's env into a job it lacks", rt("r15", utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{EnvInjection: &trainer.EnvInjection{
			Targets: []trainer.EnvInjectionTarget{{JobName: "evaluator", ContainerNames: []string{"eval"}}},
		}})), []string{`TrainingRuntime.trainer.kubeflow.org "r15" is invalid: spec.mlPolicy.torch.envInjection.targets[0].jobName: Invalid value: "evaluator": the runtime's template has no replicated job of that name`}},
		{"a torch runtime that injects torchrun's env into a container it lacks", rt("r16", utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{EnvInjection: &trainer.EnvInjection{
			Targets: []trainer.EnvInjectionTarget{{JobName: "node", ContainerNames: []string{"node", "sidecar"}}},
		}})), []string{`spec.mlPolicy.torch.envInjection.targets[0].containerNames[1]: Invalid value: "sidecar": replicated job "node" has no container or init container of that name`}},
		{"a Volcano runtime whose gang jobs name two priority classes", rt("r17", utiltesting.MakeRuntimeSpec().ReplicatedJobs(
			withPriority(utiltesting.ReplicatedJob("launcher", "", "launcher"), "low"), withPriority(node, "high"),
		).PodGroupPolicy(trainer.PodGroupPolicySource{Volcano: &trainer.VolcanoPodGroupPolicySource{}})),
			[]string{`spec.template.spec.replicatedJobs[1].template.spec.template.spec.priorityClassName: Invalid value: "high": replicated job "node" names priority class "high" and replicated job "launcher" names "low"`}},

		// Runtimes the schema refuses, before the webhook.
		{"a runtime too large for its TrainJobs to keep a copy of", rt("r15", utiltesting.MakeRuntimeSpec().ReplicatedJobs(withEnv(node, "BIG", strings.Repeat("x", 1100<<10)))),
			[]string{`spec: Forbidden: the runtime is too large: it takes`, "its TrainJobs keep a copy of it in a ConfigMap, which holds at most 1032192"}},
		{"a runtime with two frameworks", rt("r13", utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{}).JAX()),
			[]string{"spec.mlPolicy", "at most one of torch, mpi, xgboost, jax and flux may be set"}},
		{"a runtime with torch and flux", rt("r19", utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{}).Flux(&trainer.FluxMLPolicySource{})),
			[]string{"spec.mlPolicy", "at most one of torch, mpi, xgboost, jax and flux may be set"}},
		{"a Flux runtime of no tasks per node", rt("r20", utiltesting.MakeRuntimeSpec().Flux(&trainer.FluxMLPolicySource{NumProcPerNode: ptr.To[int32](0)})),
			[]string{"spec.mlPolicy.flux.numProcPerNode", "numProcPerNode must be at least 1"}},
		{"numNodes with an elastic policy", rt("r14", utiltesting.MakeRuntimeSpec().NumNodes(2).Torch(elastic.MLPolicy.Torch)),
			[]string{"spec.mlPolicy", "numNodes must be omitted when torch.elasticPolicy is set"}},
	}
	require.GreaterOrEqual(t, len(cases), 40)
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

// TestSamplesAreAccepted applies every sample through the webhooks; the shipped runtimes were
// applied when the suite started.
func TestSamplesAreAccepted(t *testing.T) {
	ns := newNamespace(t)
	objs, err := testenv.Kustomize(filepath.Join("..", "..", "..", "config", "samples"))
	require.NoError(t, err)
	for _, obj := range objs {
		if obj.GetKind() != trainer.ClusterTrainingRuntimeKind {
			obj.SetNamespace(ns)
		}
	}
	// Runtimes first, as kubectl applies them (cluster-scoped kinds first).
	for _, first := range []bool{true, false} {
		for _, obj := range objs {
			if (obj.GetKind() != "TrainJob") == first {
				require.NoError(t, testenv.Apply(context.Background(), k8sClient, "samples", obj), "%s %s", obj.GetKind(), obj.GetName())
			}
		}
	}
}

func TestRuntimeDefaults(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	cases := map[string]struct {
		spec trainer.TrainingRuntimeSpec
		want *int32
	}{
		"a runtime without mlPolicy runs one node":   {utiltesting.MakeRuntimeSpec().Obj(), ptr.To[int32](1)},
		"a torch runtime without numNodes runs one":  {utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{}).Obj(), ptr.To[int32](1)},
		"an explicit numNodes is kept":               {utiltesting.MakeRuntimeSpec().NumNodes(4).Obj(), ptr.To[int32](4)},
		"an elastic runtime gets no numNodes at all": {utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{ElasticPolicy: &trainer.TorchElasticPolicy{MaxNodes: ptr.To[int32](3)}}).Obj(), nil},
	}
	i := 0
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			i++
			rt := utiltesting.TrainingRuntime("defaults-"+string(rune('a'+i)), ns, tc.spec)
			require.NoError(t, k8sClient.Create(ctx, rt))
			require.NotNil(t, rt.Spec.MLPolicy)
			assert.Equal(t, tc.want, rt.Spec.MLPolicy.NumNodes)
		})
	}
}

func TestAMissingRuntimeIsAWarning(t *testing.T) {
	ns := newNamespace(t)
	c, collected, err := testenv.ClientWithWarnings(restCfg)
	require.NoError(t, err)

	tj := utiltesting.MakeTrainJob("early", ns).RuntimeRef(trainer.TrainingRuntimeKind, "later").Obj()
	require.NoError(t, c.Create(context.Background(), tj), "a TrainJob whose runtime may still come was refused")
	assert.Equal(t, []string{`spec.runtimeRef: TrainingRuntime "later": not found: the TrainJob fails unless it is created within seconds`}, collected.Texts())
}

// A TrainJob queued by Kueue is warned about the fields Kueue's updates drop and the shapes it
// cannot read; the same TrainJob without a queue is not.
func TestKueueWarnings(t *testing.T) {
	ns := newNamespace(t)
	c, collected, err := testenv.ClientWithWarnings(restCfg)
	require.NoError(t, err)

	tj := func(name string) *trainer.TrainJob {
		o := utiltesting.MakeTrainJob(name, ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch-distributed").NumProcPerNode(intstr.FromString("auto")).
			PodSpecOverrides(trainer.PodSpecOverride{PodSpecPatch: trainer.PodSpecPatch{NodeSelector: map[string]string{"pool": "a"}}}).Obj()
		o.Spec.Labels = map[string]string{"team": "a"}
		return o
	}
	require.NoError(t, c.Create(context.Background(), tj("unqueued")))
	assert.Empty(t, collected.Texts())

	queued := tj("queued")
	queued.Labels = map[string]string{"kueue.x-k8s.io/queue-name": "team-a"}
	queued.Spec.ProgressDeadlineSeconds = ptr.To[int32](600)
	queued.Spec.TTLSecondsAfterFinished = ptr.To[int32](600)
	require.NoError(t, c.Create(context.Background(), queued))
	assert.Equal(t, []string{
		"spec.podSpecOverrides: Kueue drops this field when it updates the TrainJob (upstream Kubeflow Trainer has no such field): use spec.runtimePatches",
		"spec.labels: Kueue drops this field when it updates the TrainJob (upstream Kubeflow Trainer has no such field): use spec.runtimePatches",
		"spec.progressDeadlineSeconds: Kueue drops this field when it updates the TrainJob (upstream Kubeflow Trainer has no such field): set the runtime's stallPolicy instead",
		"spec.ttlSecondsAfterFinished: Kueue drops this field when it updates the TrainJob (upstream Kubeflow Trainer v2.2 has no such field): set the runtime's runPolicy.ttlSecondsAfterFinished instead",
		`spec.trainer.numProcPerNode: Kueue reads it as an integer (as upstream Kubeflow Trainer has it) and cannot read "auto": write a number`,
	}, collected.Texts())
}

// Devices claimed by a TrainJob: Kueue would drop them (and count them against no quota), and
// torch's auto cannot count their GPUs.
func TestDeviceClaimWarnings(t *testing.T) {
	ns := newNamespace(t)
	c, collected, err := testenv.ClientWithWarnings(restCfg)
	require.NoError(t, err)
	gpus := []trainer.TrainerResourceClaim{{Name: "gpus", ResourceClaimTemplateName: ptr.To("h100-x8")}}

	counted := utiltesting.MakeTrainJob("counted", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch-distributed").
		Trainer(&trainer.Trainer{NumProcPerNode: ptr.To(intstr.FromInt32(8)), ResourceClaimsPerNode: gpus}).Obj()
	require.NoError(t, c.Create(context.Background(), counted))
	assert.Empty(t, collected.Texts())

	auto := utiltesting.MakeTrainJob("auto", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch-distributed").
		Trainer(&trainer.Trainer{ResourceClaimsPerNode: gpus}).Obj()
	require.NoError(t, c.Create(context.Background(), auto))
	assert.Equal(t, []string{"spec.trainer.numProcPerNode: auto runs one process per GPU resource of the trainer container, else per CPU: " +
		"the GPUs of resourceClaimsPerNode are not counted (their number is in the ResourceClaimTemplate); set numProcPerNode to a number"}, collected.Texts())

	queued := utiltesting.MakeTrainJob("queued", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch-distributed").
		Trainer(&trainer.Trainer{NumProcPerNode: ptr.To(intstr.FromInt32(8)), ResourceClaimsPerNode: gpus}).
		RuntimePatches(utiltesting.JobPatch("user", utiltesting.PodPatch("node", nil, &trainer.PodSpecPatch{
			ResourceClaims: []corev1.PodResourceClaim{{Name: "scratch", ResourceClaimTemplateName: ptr.To("nvme")}}}))).Obj()
	queued.Labels = map[string]string{"kueue.x-k8s.io/queue-name": "team-a"}
	require.NoError(t, c.Create(context.Background(), queued))
	assert.Equal(t, []string{
		"spec.trainer.numProcPerNode: auto runs one process per GPU resource of the trainer container, else per CPU: " +
			"the GPUs of resourceClaimsPerNode are not counted (their number is in the ResourceClaimTemplate); set numProcPerNode to a number",
		"spec.trainer.resourceClaimsPerNode: Kueue drops this field when it updates the TrainJob (upstream Kubeflow Trainer has no such field), " +
			"and its devices count against no quota: claim them in the runtime's pod templates",
		"spec.runtimePatches: a patch's resourceClaims: Kueue drops them when it updates the TrainJob (upstream Kubeflow Trainer has no such field): claim the devices in the runtime's pod templates",
	}, collected.Texts())
}

// A runtime of one torch process per GPU whose template has no GPUs leaves the GPUs to its
// TrainJobs, as upstream's GPU runtimes do: it is admitted, with a warning saying what its
// TrainJobs need, and a TrainJob that brings none is refused, naming the field to set.
func TestAGPURuntimeWithoutGPUsLeavesThemToItsTrainJobs(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	c, collected, err := testenv.ClientWithWarnings(restCfg)
	require.NoError(t, err)
	spec := utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{NumProcPerNode: ptr.To(intstr.FromString("gpu"))}).Obj()
	require.NoError(t, c.Create(ctx, utiltesting.TrainingRuntime("per-gpu", ns, spec)))
	assert.Equal(t, []string{`TrainJobs of this runtime must set spec.trainer.resourcesPerNode: TrainingRuntime "per-gpu" runs one process per GPU ` +
		`(mlPolicy.torch.numProcPerNode: gpu), and the trainer container "node" has no GPU resource: give the nodes GPUs`}, collected.Texts())

	without := utiltesting.MakeTrainJob("cpu-only", ns).RuntimeRef(trainer.TrainingRuntimeKind, "per-gpu").Obj()
	err = k8sClient.Create(ctx, without)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.trainer.resourcesPerNode: Required value")
	with := utiltesting.MakeTrainJob("gpus", ns).RuntimeRef(trainer.TrainingRuntimeKind, "per-gpu").
		Trainer(&trainer.Trainer{ResourcesPerNode: &corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("4")}}}).Obj()
	require.NoError(t, k8sClient.Create(ctx, with))
}
