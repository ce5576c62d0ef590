// Package mpi runs MPI TrainJobs. The runtime's trainer job is the launcher: one pod whose trainer
// container runs mpirun with the TrainJob's command. mpirun starts the training processes over SSH
// on the pods of the node job, whose "node" container runs sshd. The operator makes the two trust
// each other with a generated SSH key pair, and tells mpirun where the processes go with a
// hostfile that lists every node pod and its slots.
package mpi

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
)

// Name of the framework and its controller.
const Name = "mpi"

const (
	// NodeJob is the name of the replicated job whose pods run sshd and the MPI processes that
	// mpirun starts on them. The hostfile lists its pods.
	NodeJob = "node"
	// NodeContainer is the container of the node job that runs sshd. It gets the SSH keys, the
	// TrainJob's image and its resourcesPerNode.
	NodeContainer = "node"
)

// Defaults of mlPolicy.mpi, which the API server applies; objects that did not come through it
// get them here.
const (
	DefaultNumProcPerNode    int32 = 1
	DefaultMPIImplementation       = trainer.MPIImplementationOpenMPI
	DefaultSSHAuthMountPath        = "/root/.ssh"
)

type mpi struct{}

// The MPI controller creates each TrainJob's SSH key Secret once, and never reads Secrets: it
// patches one only to take over a Secret of the same name left by an earlier TrainJob. It applies
// the hostfile ConfigMaps.
// +kubebuilder:rbac:groups="",resources=secrets,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=create;patch

// New returns the MPI framework.
func New() framework.Framework { return mpi{} }

func (mpi) Name() string { return Name }

// Selects runtimes with an MPI policy.
func (mpi) Selects(p *trainer.MLPolicy) bool { return p != nil && p.MPI != nil }

// ReadsNumProcPerNode: spec.trainer.numProcPerNode overrides the runtime's slots.
func (mpi) ReadsNumProcPerNode() {}

// ReservedEnv are the hostfile variables of all three implementations, whichever the runtime
// chooses: a user who sets another implementation's variable by hand most likely runs a
// different mpirun than the runtime says, and would get a hostfile in the wrong syntax.
func (mpi) ReservedEnv() []string {
	return []string{OpenMPIHostfileEnv, IntelHostfileEnv, MPICHHostfileEnv}
}

// Apply sizes the launcher and node jobs, gives the node container the TrainJob's image and
// resources, and adds the SSH keys and the hostfile.
func (mpi) Apply(b *framework.Draft) error {
	policy := b.MLPolicy().MPI
	impl := ptr.Deref(policy.MPIImplementation, "")
	if impl == "" { // Upstream's schema allows an empty one, which means the default.
		impl = DefaultMPIImplementation
	}
	hostfileEnv, ok := hostfileEnvs[impl]
	if !ok {
		return b.RuntimeError(field.NotSupported(framework.MLPolicyPath.Child("mpi", "mpiImplementation"), impl,
			[]trainer.MPIImplementation{trainer.MPIImplementationOpenMPI, trainer.MPIImplementationIntel, trainer.MPIImplementationMPICH}))
	}
	launcherAsNode := ptr.Deref(policy.RunLauncherAsNode, false)
	launcher := b.TrainerJob()
	if launcher.Name == NodeJob {
		return b.RuntimeError(field.Invalid(b.TrainerJobPath().Child("name"), launcher.Name,
			fmt.Sprintf("the MPI launcher, the job labelled %s=%s, needs a name of its own: %q is the node job's", trainer.AncestorStepLabel, trainer.AncestorTrainer, NodeJob)))
	}
	nodeJob, node, err := nodeJobAndContainer(b)
	if err != nil {
		return err
	}
	slots, err := numProcPerNode(b, policy)
	if err != nil {
		return err
	}
	// With runLauncherAsNode the launcher is the first node; on one node it is the only one, as
	// DeepSpeed runs on a single machine, and the node job runs no pod.
	nodePods := b.NumNodes
	if launcherAsNode {
		nodePods--
	}

	b.SetNodes(1)
	nodeJob.Template.Spec.Parallelism, nodeJob.Template.Spec.Completions = ptr.To(nodePods), ptr.To(nodePods)
	// The nodes are the node job's pods, and the launcher when it is one; it is the trainer job.
	b.NodeJobs = []string{NodeJob}
	if launcherAsNode {
		b.NodeJobs = []string{launcher.Name, NodeJob}
	}
	if err := applyResources(b, node, launcherAsNode); err != nil {
		return err
	}
	slots = slotsPerGPU(b, slots, node)

	if err := addSSHAuth(b, &nodeJob.Template.Spec.Template.Spec, node, ptr.Deref(policy.SSHAuthMountPath, DefaultSSHAuthMountPath)); err != nil {
		return err
	}
	addHostfile(b, hostfile(b, impl, slots, nodePods, launcherAsNode), hostfileEnv)
	if impl == trainer.MPIImplementationOpenMPI {
		addOpenMPIDefaults(b, slots)
	}
	return nil
}

// nodeJobAndContainer finds the node job and its sshd container in the JobSet being built.
func nodeJobAndContainer(b *framework.Draft) (*jobsetv1alpha2.ReplicatedJob, *corev1.Container, error) {
	jobs := b.JobSet.Spec.ReplicatedJobs
	j := slices.IndexFunc(jobs, func(job jobsetv1alpha2.ReplicatedJob) bool { return job.Name == NodeJob })
	if j < 0 {
		return nil, nil, b.RuntimeError(field.Required(framework.RuntimeJobsPath,
			fmt.Sprintf("MPI runs its processes on the pods of a replicated job named %q", NodeJob)))
	}
	containers := jobs[j].Template.Spec.Template.Spec.Containers
	c := slices.IndexFunc(containers, func(c corev1.Container) bool { return c.Name == NodeContainer })
	if c < 0 {
		return nil, nil, b.RuntimeError(field.Required(framework.RuntimeJobsPath.Index(j).Child("template", "spec", "template", "spec", "containers"),
			fmt.Sprintf("the node job needs a container named %q to run sshd", NodeContainer)))
	}
	return &jobs[j], &containers[c], nil
}

// numProcPerNode is the number of slots per node: the TrainJob's spec.trainer.numProcPerNode,
// else the runtime's mlPolicy.mpi.numProcPerNode, else 1. MPI needs a number: "auto", "cpu" and
// "gpu" are torchrun's.
func numProcPerNode(b *framework.Draft, policy *trainer.MPIMLPolicySource) (int32, error) {
	if t := b.TrainJob.Spec.Trainer; t != nil && t.NumProcPerNode != nil {
		n, err := strconv.ParseInt(t.NumProcPerNode.String(), 10, 32)
		if err != nil || n < 1 {
			return 0, field.Invalid(framework.TrainerPath.Child("numProcPerNode"), t.NumProcPerNode.String(),
				"MPI needs a positive integer: the slots per node")
		}
		return int32(n), nil
	}
	n := ptr.Deref(policy.NumProcPerNode, DefaultNumProcPerNode)
	if n < 1 {
		return 0, b.RuntimeError(field.Invalid(framework.MLPolicyPath.Child("mpi", "numProcPerNode"), n, "must be at least 1"))
	}
	return n, nil
}

// slotsPerGPU is the slots per node once the node's GPUs are known: a runtime of one slot per
// node whose nodes have more than one GPU (the TrainJob's resourcesPerNode, else the runtime's)
// runs one slot per GPU, as upstream Trainer does and its DeepSpeed runtime relies on. A
// numProcPerNode the TrainJob sets is kept as it is.
func slotsPerGPU(b *framework.Draft, slots int32, node *corev1.Container) int32 {
	if t := b.TrainJob.Spec.Trainer; slots != 1 || (t != nil && t.NumProcPerNode != nil) {
		return slots
	}
	if gpus := framework.GPUs(node); gpus > 1 && gpus <= math.MaxInt32 {
		return int32(gpus)
	}
	return slots
}

// applyResources runs the TrainJob's image and resourcesPerNode on the node container, which the
// pipeline gave only to the launcher: every MPI process must run the same image, and the node
// pods are the nodes. A launcher that is not a node only runs mpirun, so it gets the runtime's
// resources back.
func applyResources(b *framework.Draft, node *corev1.Container, launcherAsNode bool) error {
	t := b.TrainJob.Spec.Trainer
	if t == nil {
		return nil
	}
	if t.Image != nil {
		node.Image = *t.Image
	}
	if err := b.ApplyResourcesPerNode(node); err != nil {
		return err
	}
	if !launcherAsNode {
		b.TrainerContainer().Resources = *b.RuntimeTrainerContainer().Resources.DeepCopy()
	}
	return nil
}
