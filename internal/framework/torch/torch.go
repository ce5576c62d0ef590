// Package torch runs TrainJobs with PyTorch's torchrun. torchrun reads its settings from PET_*
// environment variables, so the operator sets them on every node and the runtime's command can
// stay a plain `torchrun train.py`. torchtune's `tune run`, which starts torchrun itself, also
// gets its recipe, config and rendezvous on the command line when a TrainJob asks for just
// `tune run`, as the Kubeflow SDK's BuiltinTrainer does (torchtune.go).
package torch

import (
	"fmt"
	"slices"
	"strconv"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
	"github.com/trainjob/operator/internal/upsert"
)

// Name of the framework and its controller.
const Name = "torch"

// Port is where the first node serves the rendezvous (static master or c10d store).
const Port = 29400

// The env vars torchrun reads, all set by the operator.
const (
	EnvNumNodes       = "PET_NNODES"
	EnvNumProcPerNode = "PET_NPROC_PER_NODE"
	EnvNodeRank       = "PET_NODE_RANK"
	EnvMasterAddr     = "PET_MASTER_ADDR"
	EnvMasterPort     = "PET_MASTER_PORT"
	EnvRdzvBackend    = "PET_RDZV_BACKEND"
	EnvRdzvEndpoint   = "PET_RDZV_ENDPOINT"
	EnvRdzvID         = "PET_RDZV_ID"
	EnvMaxRestarts    = "PET_MAX_RESTARTS"
)

// DefaultClusterDomain is the cluster's DNS domain unless the manager is told another one.
const DefaultClusterDomain = "cluster.local"

type torch struct {
	// clusterDomain is the cluster's DNS domain, the end of the pods' fully qualified names.
	clusterDomain string
}

// New returns the torch framework for a cluster whose DNS domain is clusterDomain (the
// kubelets' clusterDomain); empty means DefaultClusterDomain.
func New(clusterDomain string) framework.Framework {
	if clusterDomain == "" {
		clusterDomain = DefaultClusterDomain
	}
	return torch{clusterDomain: clusterDomain}
}

func (torch) Name() string { return Name }

func (torch) Selects(p *trainer.MLPolicy) bool { return p != nil && p.Torch != nil }

// ReadsNumProcPerNode: spec.trainer.numProcPerNode overrides the runtime's.
func (torch) ReadsNumProcPerNode() {}

func (torch) ReservedEnv() []string {
	return []string{EnvNumNodes, EnvNumProcPerNode, EnvNodeRank, EnvMasterAddr, EnvMasterPort,
		EnvRdzvBackend, EnvRdzvEndpoint, EnvRdzvID, EnvMaxRestarts}
}

// Apply sets torchrun's environment on every node, and in the containers the runtime's
// envInjection names: a static rendezvous on the first node, or with an elastic policy a c10d
// rendezvous between minNodes and maxNodes nodes. A TrainJob whose command is `tune run` gets
// the rest of torchtune's command line instead of the static rendezvous's address (torchtune.go).
func (t torch) Apply(b *framework.Draft) error {
	env, procs, err := t.environment(b, b.MLPolicy().Torch)
	if err != nil {
		return err
	}
	if runsTune(b) {
		command, err := tuneCommand(b, procs)
		if err != nil {
			return err
		}
		b.TrainerContainer().Command = command
		// The rendezvous is on the command line, as upstream Kubeflow Trainer gives it.
		env = slices.DeleteFunc(env, func(e corev1.EnvVar) bool { return e.Name == EnvMasterAddr || e.Name == EnvMasterPort })
	}
	targets, err := t.EnvTargets(b)
	if err != nil {
		return err
	}
	b.SetPort("torchrun", Port)
	for _, c := range append([]framework.ContainerRef{b.Trainer()}, targets...) {
		b.SetEnvIn(c, env...)
	}
	return nil
}

// EnvTargets are the containers and init containers that the runtime's
// mlPolicy.torch.envInjection names. A job or container the runtime lacks is the runtime's
// error. The trainer container, which gets the environment anyway, is left out.
func (torch) EnvTargets(b *framework.Draft) ([]framework.ContainerRef, error) {
	injection := b.MLPolicy().Torch.EnvInjection
	if injection == nil {
		return nil, nil
	}
	path := framework.MLPolicyPath.Child("torch", "envInjection", "targets")
	var refs []framework.ContainerRef
	for i, target := range injection.Targets {
		job := slices.IndexFunc(b.JobSet.Spec.ReplicatedJobs, func(j jobsetv1alpha2.ReplicatedJob) bool { return j.Name == target.JobName })
		if job < 0 {
			return nil, b.RuntimeError(field.Invalid(path.Index(i).Child("jobName"), target.JobName,
				"the runtime's template has no replicated job of that name"))
		}
		for k, name := range target.ContainerNames {
			ref, ok := b.ContainerNamed(job, name)
			if !ok {
				return nil, b.RuntimeError(field.Invalid(path.Index(i).Child("containerNames").Index(k), name,
					fmt.Sprintf("replicated job %q has no container or init container of that name", target.JobName)))
			}
			if ref != b.Trainer() {
				refs = append(refs, ref)
			}
		}
	}
	return refs, nil
}

// environment is torchrun's environment, the same in every container that gets it, and makes
// the trainer job fit it: Indexed, for the ranks, and sized by the elastic policy. It also returns
// the processes per node.
func (t torch) environment(b *framework.Draft, policy *trainer.TorchMLPolicySource) ([]corev1.EnvVar, int64, error) {
	procs, err := numProcPerNode(b, policy)
	if err != nil {
		return nil, 0, err
	}
	master := b.PodAddress(b.TrainerJob().Name, 0, 0)
	env := []corev1.EnvVar{
		b.RankEnv(EnvNodeRank),
		{Name: EnvNumNodes, Value: strconv.Itoa(int(b.NumNodes))},
		{Name: EnvNumProcPerNode, Value: strconv.FormatInt(procs, 10)},
		{Name: EnvMasterAddr, Value: master},
		{Name: EnvMasterPort, Value: strconv.Itoa(Port)},
	}
	if policy.ElasticPolicy == nil {
		return env, procs, nil
	}
	elastic, err := applyElastic(b, framework.ElasticPolicyFor(b.TrainJob, b.MLPolicy()), t.fqdn(b, master))
	return upsert.Env(env, elastic...), procs, err
}

// applyElastic runs numNodes pods (maxNodes unless the TrainJob says fewer) that rendezvous
// through the c10d store of the first node, whose fully qualified name is host, and lets
// torchrun and the JobSet restart the training maxRestarts times; it returns the elastic part of
// torchrun's environment. The Job, the gang and torchrun agree on every size a run may have, so
// that the trainer job may grow and shrink in place while it runs (the operator's resize): the
// environment names the bounds, not the size; the gang is placed with minNodes pods, and later
// ones are let through at once; the Job succeeds once minNodes pods did (a Job success policy),
// so that a run at any size completes; and the rendezvous is on the first pod, which a resize
// never removes (the Job controller removes the highest indexes).
func applyElastic(b *framework.Draft, elastic *trainer.TorchElasticPolicy, host string) ([]corev1.EnvVar, error) {
	if err := framework.CheckElasticSize(b.TrainJob, elastic, b.NumNodes, b.Runtime.String()); err != nil {
		return nil, err
	}
	minNodes, maxNodes := framework.ElasticBounds(elastic)
	if minNodes < maxNodes {
		// The trainer job is Indexed (RankEnv), as a success policy needs.
		b.TrainerJob().Template.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{{SucceededCount: ptr.To(minNodes)}}}
	}
	env := []corev1.EnvVar{
		{Name: EnvNumNodes, Value: fmt.Sprintf("%d:%d", minNodes, maxNodes)},
		{Name: EnvRdzvBackend, Value: "c10d"},
		{Name: EnvRdzvEndpoint, Value: fmt.Sprintf("%s:%d", host, Port)},
		{Name: EnvRdzvID, Value: b.TrainJob.Name},
	}
	switch {
	case elastic.MaxRestarts != nil:
		env = append(env, corev1.EnvVar{Name: EnvMaxRestarts, Value: strconv.Itoa(int(*elastic.MaxRestarts))})
		if b.JobSet.Spec.FailurePolicy == nil {
			b.JobSet.Spec.FailurePolicy = &jobsetv1alpha2.FailurePolicy{}
		}
		b.JobSet.Spec.FailurePolicy.MaxRestarts = *elastic.MaxRestarts
	case minNodes < maxNodes:
		// A scale-down spends one of torchrun's restarts on every node that stays: with its
		// default of none, the first would end the training.
		env = append(env, corev1.EnvVar{Name: EnvMaxRestarts, Value: strconv.Itoa(DefaultElasticMaxRestarts)})
	}
	return env, nil
}

// DefaultElasticMaxRestarts is torchrun's --max-restarts for a TrainJob that may change size and
// whose runtime's elastic policy sets none.
const DefaultElasticMaxRestarts = 3

// fqdn is the fully qualified name of a pod's address (PodAddress): the name the kubelet writes
// first for the pod in its /etc/hosts, which torchrun's c10d rendezvous compares the endpoint's
// host with to decide that this pod hosts the store. Any shorter name resolves as well, but no
// pod would host it.
func (t torch) fqdn(b *framework.Draft, address string) string {
	return fmt.Sprintf("%s.%s.svc.%s", address, b.TrainJob.Namespace, t.clusterDomain)
}

// NumProcPerNode is a torch TrainJob's processes per node as written, before numProcPerNode
// resolves it: the TrainJob's value, else the runtime's, else "auto".
func NumProcPerNode(tj *trainer.TrainJob, policy *trainer.TorchMLPolicySource) string {
	if t := tj.Spec.Trainer; t != nil && t.NumProcPerNode != nil {
		return t.NumProcPerNode.String()
	}
	if policy.NumProcPerNode != nil {
		return policy.NumProcPerNode.String()
	}
	return "auto"
}

// numProcPerNode resolves the processes per node to a number, so that the world size is fixed
// when the pods start: the TrainJob's value, else the runtime's, else "auto". "gpu" is the
// trainer container's GPU count, "cpu" its CPU limit (else request) rounded down and at least 1,
// and "auto" is "gpu" when the container has GPUs, else "cpu".
func numProcPerNode(b *framework.Draft, policy *trainer.TorchMLPolicySource) (int64, error) {
	value := NumProcPerNode(b.TrainJob, policy)
	invalid := func(detail string) error {
		return b.RuntimeError(field.Invalid(framework.MLPolicyPath.Child("torch", "numProcPerNode"), value, detail))
	}
	if t := b.TrainJob.Spec.Trainer; t != nil && t.NumProcPerNode != nil {
		invalid = func(detail string) error {
			return field.Invalid(framework.TrainerPath.Child("numProcPerNode"), value, detail)
		}
	}
	c := b.TrainerContainer()
	gpus := framework.GPUs(c)
	switch value {
	case "auto":
		if gpus > 0 {
			return gpus, nil
		}
		return framework.CPUs(c), nil
	case "gpu":
		switch {
		case gpus > 0:
		case framework.ClaimsDevices(b):
			return 0, field.Invalid(framework.TrainerPath.Child("numProcPerNode"), value, fmt.Sprintf(
				"one process per GPU, and the trainer container %q gets its devices from resource claims, whose GPUs the operator does not count (their number is in a ResourceClaimTemplate): set numProcPerNode to a number", c.Name))
		case b.TrainJob.Spec.Trainer != nil && b.TrainJob.Spec.Trainer.NumProcPerNode != nil:
			return 0, invalid(fmt.Sprintf("the trainer container %q has no GPU resource", c.Name))
		default:
			// The runtime's "gpu" leaves the GPUs to its TrainJobs: this one brought none.
			return 0, field.Required(framework.TrainerPath.Child("resourcesPerNode"),
				fmt.Sprintf("%s runs one process per GPU (mlPolicy.torch.numProcPerNode: gpu), and the trainer container %q has no GPU resource: give the nodes GPUs", b.Runtime, c.Name))
		}
		return gpus, nil
	case "cpu":
		return framework.CPUs(c), nil
	}
	n, err := strconv.ParseInt(value, 10, 32)
	if err != nil || n < 1 {
		return 0, invalid("must be auto, cpu, gpu or a positive integer below 2^31")
	}
	return n, nil // "007" and "+7" reach torchrun as 7.
}
