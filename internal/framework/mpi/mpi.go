// Package mpi runs MPI TrainJobs. The runtime's trainer job is the launcher: one pod whose trainer
// container runs mpirun with the TrainJob's command. mpirun starts the training processes over SSH
// on the pods of the node job, whose "node" container runs sshd. The operator makes the two trust
// each other with a generated SSH key pair, and tells mpirun where the processes go with a
// hostfile that lists every node pod and its slots.
package mpi

import (
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
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

// The MPI controller creates each TrainJob's SSH key Secret once and never reads Secrets; it
// applies the hostfile ConfigMaps, which the manager caches by label.
// +kubebuilder:rbac:groups="",resources=secrets,verbs=create
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;patch

// New returns the MPI framework.
func New() framework.Framework { return mpi{} }

func (mpi) Name() string { return Name }

// Selects runtimes with an MPI policy.
func (mpi) Selects(p *trainer.MLPolicy) bool { return p != nil && p.MPI != nil }

// ReservedEnv are the hostfile variables of all three implementations, whichever the runtime
// chooses: a user who sets another implementation's variable by hand most likely runs a
// different mpirun than the runtime says, and would get a hostfile in the wrong syntax.
func (mpi) ReservedEnv() []string {
	return []string{OpenMPIHostfileEnv, IntelHostfileEnv, MPICHHostfileEnv}
}

// Apply sizes the launcher and node jobs, gives the node container the TrainJob's image and
// resources, and adds the SSH keys and the hostfile.
func (mpi) Apply(b *framework.Build) error {
	policy := b.MLPolicy().MPI
	impl := ptr.Deref(policy.MPIImplementation, DefaultMPIImplementation)
	hostfileEnv, ok := hostfileEnvs[impl]
	if !ok {
		return fmt.Errorf("%s: mlPolicy.mpi.mpiImplementation %q is not one of OpenMPI, Intel, MPICH", b.Runtime, impl)
	}
	launcherAsNode := ptr.Deref(policy.RunLauncherAsNode, false)
	launcher := b.TrainerJob()
	if launcher.Name == NodeJob {
		return fmt.Errorf("%s: the MPI launcher, the replicated job labelled %s=%s, may not be named %q: that name is the node job's",
			b.Runtime, trainer.AncestorStepLabel, trainer.AncestorTrainer, NodeJob)
	}
	nodeJob, node, err := nodeJobAndContainer(b)
	if err != nil {
		return err
	}
	slots, err := numProcPerNode(b, policy)
	if err != nil {
		return err
	}
	nodePods := b.NumNodes
	if launcherAsNode {
		if b.NumNodes < 2 {
			return fmt.Errorf("%s: mlPolicy.mpi.runLauncherAsNode needs numNodes of at least 2, the launcher and one node, but it is %d",
				b.Runtime, b.NumNodes)
		}
		nodePods--
	}

	b.SetNodes(1)
	nodeJob.Template.Spec.Parallelism, nodeJob.Template.Spec.Completions = ptr.To(nodePods), ptr.To(nodePods)
	if err := applyResources(b, node, launcherAsNode); err != nil {
		return err
	}

	if err := addSSHAuth(b, &nodeJob.Template.Spec.Template.Spec, node, ptr.Deref(policy.SSHAuthMountPath, DefaultSSHAuthMountPath)); err != nil {
		return err
	}
	addHostfile(b, hostfile(b, impl, slots, nodePods, launcherAsNode), hostfileEnv)
	return nil
}

// nodeJobAndContainer finds the node job and its sshd container in the JobSet being built.
func nodeJobAndContainer(b *framework.Build) (*jobsetv1alpha2.ReplicatedJob, *corev1.Container, error) {
	job := jobByName(b.JobSet.Spec.ReplicatedJobs, NodeJob)
	if job == nil {
		return nil, nil, fmt.Errorf("%s has no replicated job %q: MPI runs its processes on the pods of the node job", b.Runtime, NodeJob)
	}
	c := containerByName(job.Template.Spec.Template.Spec.Containers, NodeContainer)
	if c == nil {
		return nil, nil, fmt.Errorf("%s: replicated job %q has no container named %q to run sshd", b.Runtime, NodeJob, NodeContainer)
	}
	return job, c, nil
}

// numProcPerNode is the number of slots per node: the TrainJob's spec.trainer.numProcPerNode,
// else the runtime's mlPolicy.mpi.numProcPerNode, else 1. MPI needs a number: "auto", "cpu" and
// "gpu" are torchrun's.
func numProcPerNode(b *framework.Build, policy *trainer.MPIMLPolicySource) (int32, error) {
	if t := b.TrainJob.Spec.Trainer; t != nil && t.NumProcPerNode != nil {
		n, err := strconv.ParseInt(*t.NumProcPerNode, 10, 32)
		if err != nil || n < 1 {
			return 0, fmt.Errorf("spec.trainer.numProcPerNode: %q is not a positive integer, which the MPI framework needs as the slots per node",
				*t.NumProcPerNode)
		}
		return int32(n), nil
	}
	n := ptr.Deref(policy.NumProcPerNode, DefaultNumProcPerNode)
	if n < 1 {
		return 0, fmt.Errorf("%s: mlPolicy.mpi.numProcPerNode is %d; it must be at least 1", b.Runtime, n)
	}
	return n, nil
}

// applyResources runs the TrainJob's image and resourcesPerNode on the node container, which the
// pipeline gave only to the launcher: every MPI process must run the same image, and the node
// pods are the nodes. A launcher that is not a node only runs mpirun, so it gets the runtime's
// resources back.
func applyResources(b *framework.Build, node *corev1.Container, launcherAsNode bool) error {
	t := b.TrainJob.Spec.Trainer
	if t == nil {
		return nil
	}
	if t.Image != nil {
		node.Image = *t.Image
	}
	if t.ResourcesPerNode == nil {
		return nil
	}
	node.Resources = *t.ResourcesPerNode.DeepCopy()
	if launcherAsNode {
		return nil
	}
	launcher, c := b.TrainerJob().Name, b.TrainerContainer()
	job := jobByName(b.Runtime.Spec.Template.Spec.ReplicatedJobs, launcher)
	if job == nil {
		return fmt.Errorf("%s has no replicated job %q", b.Runtime, launcher)
	}
	original := containerByName(job.Template.Spec.Template.Spec.Containers, c.Name)
	if original == nil {
		return fmt.Errorf("%s: replicated job %q has no container %q", b.Runtime, launcher, c.Name)
	}
	c.Resources = *original.Resources.DeepCopy()
	return nil
}

func jobByName(jobs []jobsetv1alpha2.ReplicatedJob, name string) *jobsetv1alpha2.ReplicatedJob {
	if i := slices.IndexFunc(jobs, func(j jobsetv1alpha2.ReplicatedJob) bool { return j.Name == name }); i >= 0 {
		return &jobs[i]
	}
	return nil
}

func containerByName(containers []corev1.Container, name string) *corev1.Container {
	if i := slices.IndexFunc(containers, func(c corev1.Container) bool { return c.Name == name }); i >= 0 {
		return &containers[i]
	}
	return nil
}
