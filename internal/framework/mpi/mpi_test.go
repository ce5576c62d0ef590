package mpi

import (
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
	"github.com/trainjob/operator/internal/pipeline"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/internal/trainingruntime"
)

var (
	mpirunResources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}}
	gpuNode         = corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")}}
)

func trainJob() *utiltesting.TrainJobWrapper {
	return utiltesting.MakeTrainJob("mnist", "ns").UID("mnist-uid")
}

// mpiRuntime is an MPI runtime as shipped: a "launcher" job, labelled as the trainer, whose
// container "node" runs mpirun with little CPU, and a "node" job whose container "node" runs sshd.
func mpiRuntime(numNodes int32, policy *trainer.MPIMLPolicySource) *utiltesting.RuntimeSpecWrapper {
	launcher := utiltesting.ReplicatedJob("launcher", trainer.AncestorTrainer, "node")
	c := &launcher.Template.Spec.Template.Spec.Containers[0]
	c.Image, c.Command, c.Resources = "mpi-runtime", []string{"mpirun", "python", "/train.py"}, *mpirunResources.DeepCopy()
	node := utiltesting.ReplicatedJob("node", "", "node")
	c = &node.Template.Spec.Template.Spec.Containers[0]
	c.Image, c.Command = "mpi-runtime", []string{"/usr/sbin/sshd", "-De"}
	return utiltesting.MakeRuntimeSpec().ReplicatedJobs(launcher, node).NumNodes(numNodes).MPI(policy)
}

func openMPI(slots int32) *trainer.MPIMLPolicySource {
	return &trainer.MPIMLPolicySource{NumProcPerNode: ptr.To(slots), MPIImplementation: ptr.To(trainer.MPIImplementationOpenMPI)}
}

// wantJobSet is the JobSet of an MPI TrainJob "mnist": one launcher pod with the SSH keys at
// sshPath, the hostfile at /etc/mpi and hostfileEnv pointing at it; nodePods node pods with the
// SSH keys. The private key is 0600 for root; other users can only read kubelet's root-owned
// file when it is 0644.
func wantJobSet(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec, nodePods int32, sshPath, hostfileEnv string) *utiltesting.JobSetWrapper {
	keyMode := int32(0o600)
	if sshPath != "/root/.ssh" {
		keyMode = 0o644
	}
	sshVolume := corev1.Volume{Name: "mpi-ssh-auth", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName: "mnist-mpi-ssh-auth",
		Items: []corev1.KeyToPath{
			{Key: "ssh-privatekey", Path: "id_rsa", Mode: ptr.To(keyMode)},
			{Key: "ssh-publickey", Path: "id_rsa.pub", Mode: ptr.To[int32](0o644)},
			{Key: "authorized_keys", Path: "authorized_keys", Mode: ptr.To[int32](0o644)},
		},
		DefaultMode: ptr.To(keyMode),
	}}}
	sshMount := corev1.VolumeMount{Name: "mpi-ssh-auth", MountPath: sshPath}
	hostfileVolume := corev1.Volume{Name: "mpi-hostfile", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "mnist-mpi-hostfile"},
	}}}
	return utiltesting.MakeJobSet(tj, rt).NumNodes("launcher", 1).NumNodes("node", nodePods).
		PodSpec("launcher", func(s *corev1.PodSpec) { s.Volumes = append(s.Volumes, sshVolume, hostfileVolume) }).
		Container("launcher", "node", func(c *corev1.Container) {
			c.VolumeMounts = append(c.VolumeMounts, sshMount, corev1.VolumeMount{Name: "mpi-hostfile", MountPath: "/etc/mpi"})
			c.Env = append(c.Env, corev1.EnvVar{Name: hostfileEnv, Value: "/etc/mpi/hostfile"})
			if hostfileEnv == "OMPI_MCA_orte_default_hostfile" {
				c.Env = append(c.Env,
					corev1.EnvVar{Name: "OMPI_MCA_orte_keep_fqdn_hostnames", Value: "true"},
					corev1.EnvVar{Name: "OMPI_MCA_orte_set_default_slots", Value: slotsOf(tj, rt)},
					corev1.EnvVar{Name: "OMPI_MCA_plm_rsh_args", Value: "-o ConnectionAttempts=10"})
			}
		}).
		PodSpec("node", func(s *corev1.PodSpec) { s.Volumes = append(s.Volumes, sshVolume) }).
		Container("node", "node", func(c *corev1.Container) { c.VolumeMounts = append(c.VolumeMounts, sshMount) }).
		Annotations(map[string]string{framework.NodeJobsAnnotation: nodeJobs(rt)})
}

// nodeJobs are the jobs whose pods are the training's nodes: the node job's, and the launcher's
// when it runs as a node.
func nodeJobs(rt trainer.TrainingRuntimeSpec) string {
	if ptr.Deref(rt.MLPolicy.MPI.RunLauncherAsNode, false) {
		return "launcher,node"
	}
	return "node"
}

// slotsOf is the slots per node: the TrainJob's numProcPerNode, else the runtime's, else 1; and
// for 1, the GPUs of the TrainJob's resourcesPerNode when there are more than one.
func slotsOf(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) string {
	if tj.Spec.Trainer != nil && tj.Spec.Trainer.NumProcPerNode != nil {
		return tj.Spec.Trainer.NumProcPerNode.String()
	}
	if n := rt.MLPolicy.MPI.NumProcPerNode; n != nil && *n != 1 {
		return strconv.Itoa(int(*n))
	}
	if t := tj.Spec.Trainer; t != nil && t.ResourcesPerNode != nil {
		if gpus := t.ResourcesPerNode.Limits.Name("nvidia.com/gpu", resource.DecimalSI).Value(); gpus > 1 {
			return strconv.FormatInt(gpus, 10)
		}
	}
	return "1"
}

// wantHostfile is the hostfile ConfigMap of the TrainJob "mnist" as the API server would store it.
func wantHostfile(hostfile string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:      "mnist-mpi-hostfile",
			Namespace: "ns",
			Labels:    map[string]string{"trainer.kubeflow.org/trainjob-name": "mnist"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "TrainJob", Name: "mnist", UID: "mnist-uid",
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Data: map[string]string{"hostfile": hostfile},
	}
}

func buildMPI(tj *trainer.TrainJob, spec trainer.TrainingRuntimeSpec) (*pipeline.Children, error) {
	return pipeline.Build(tj, &trainingruntime.Runtime{Kind: trainer.ClusterTrainingRuntimeKind, Name: "mpi", Spec: &spec}, New())
}

func TestMPI(t *testing.T) {
	cases := map[string]struct {
		runtime  trainer.TrainingRuntimeSpec
		trainJob *trainer.TrainJob
		want     func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet
		// wantHostfile is the hostfile ConfigMap's text.
		wantHostfile string
		wantErr      string
	}{
		"OpenMPI: one launcher pod runs mpirun against a hostfile of the node pods with the runtime's slots": {
			runtime:  mpiRuntime(2, openMPI(4)).Obj(),
			trainJob: trainJob().Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return wantJobSet(tj, rt, 2, "/root/.ssh", "OMPI_MCA_orte_default_hostfile").Obj()
			},
			wantHostfile: "mnist-node-0-0.mnist slots=4\nmnist-node-0-1.mnist slots=4\n",
		},
		"Intel: host:slots lines and I_MPI_HYDRA_HOST_FILE": {
			runtime: mpiRuntime(2, &trainer.MPIMLPolicySource{
				NumProcPerNode: ptr.To[int32](2), MPIImplementation: ptr.To(trainer.MPIImplementationIntel),
			}).Obj(),
			trainJob: trainJob().Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return wantJobSet(tj, rt, 2, "/root/.ssh", "I_MPI_HYDRA_HOST_FILE").Obj()
			},
			wantHostfile: "mnist-node-0-0.mnist:2\nmnist-node-0-1.mnist:2\n",
		},
		"MPICH: host:slots lines and HYDRA_HOST_FILE": {
			runtime: mpiRuntime(3, &trainer.MPIMLPolicySource{
				NumProcPerNode: ptr.To[int32](1), MPIImplementation: ptr.To(trainer.MPIImplementationMPICH),
			}).Obj(),
			trainJob: trainJob().Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return wantJobSet(tj, rt, 3, "/root/.ssh", "HYDRA_HOST_FILE").Obj()
			},
			wantHostfile: "mnist-node-0-0.mnist:1\nmnist-node-0-1.mnist:1\nmnist-node-0-2.mnist:1\n",
		},
		"an empty mpiImplementation, which upstream's schema allows: OpenMPI": {
			runtime:  mpiRuntime(2, &trainer.MPIMLPolicySource{NumProcPerNode: ptr.To[int32](4), MPIImplementation: ptr.To[trainer.MPIImplementation]("")}).Obj(),
			trainJob: trainJob().Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return wantJobSet(tj, rt, 2, "/root/.ssh", "OMPI_MCA_orte_default_hostfile").Obj()
			},
			wantHostfile: "mnist-node-0-0.mnist slots=4\nmnist-node-0-1.mnist slots=4\n",
		},
		"a policy that did not come through the API server gets its defaults: OpenMPI, one slot, /root/.ssh": {
			runtime:  mpiRuntime(1, &trainer.MPIMLPolicySource{}).Obj(),
			trainJob: trainJob().Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return wantJobSet(tj, rt, 1, "/root/.ssh", "OMPI_MCA_orte_default_hostfile").Obj()
			},
			wantHostfile: "mnist-node-0-0.mnist slots=1\n",
		},
		"runLauncherAsNode: the launcher is the first host and the node job runs numNodes-1 pods": {
			runtime:  mpiRuntime(3, &trainer.MPIMLPolicySource{NumProcPerNode: ptr.To[int32](2), RunLauncherAsNode: ptr.To(true)}).Obj(),
			trainJob: trainJob().Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return wantJobSet(tj, rt, 2, "/root/.ssh", "OMPI_MCA_orte_default_hostfile").Obj()
			},
			wantHostfile: "mnist-launcher-0-0.mnist slots=2\nmnist-node-0-0.mnist slots=2\nmnist-node-0-1.mnist slots=2\n",
		},
		"runLauncherAsNode on one node: the launcher is the only host and the node job runs no pod": {
			runtime:  mpiRuntime(1, &trainer.MPIMLPolicySource{NumProcPerNode: ptr.To[int32](4), RunLauncherAsNode: ptr.To(true)}).Obj(),
			trainJob: trainJob().Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return wantJobSet(tj, rt, 0, "/root/.ssh", "OMPI_MCA_orte_default_hostfile").Obj()
			},
			wantHostfile: "mnist-launcher-0-0.mnist slots=4\n",
		},
		"the TrainJob's numProcPerNode overrides the runtime's slots": {
			runtime:  mpiRuntime(2, openMPI(4)).Obj(),
			trainJob: trainJob().NumProcPerNode(intstr.FromInt32(8)).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return wantJobSet(tj, rt, 2, "/root/.ssh", "OMPI_MCA_orte_default_hostfile").Obj()
			},
			wantHostfile: "mnist-node-0-0.mnist slots=8\nmnist-node-0-1.mnist slots=8\n",
		},
		"the TrainJob's numNodes sizes the node job and the launcher stays one pod": {
			runtime:  mpiRuntime(1, openMPI(1)).Obj(),
			trainJob: trainJob().NumNodes(4).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return wantJobSet(tj, rt, 4, "/root/.ssh", "OMPI_MCA_orte_default_hostfile").Obj()
			},
			wantHostfile: "mnist-node-0-0.mnist slots=1\nmnist-node-0-1.mnist slots=1\nmnist-node-0-2.mnist slots=1\nmnist-node-0-3.mnist slots=1\n",
		},
		"sshAuthMountPath puts the keys where a non-root image's ssh looks": {
			runtime:  mpiRuntime(1, &trainer.MPIMLPolicySource{SSHAuthMountPath: ptr.To("/home/mpiuser/.ssh")}).Obj(),
			trainJob: trainJob().Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return wantJobSet(tj, rt, 1, "/home/mpiuser/.ssh", "OMPI_MCA_orte_default_hostfile").Obj()
			},
			wantHostfile: "mnist-node-0-0.mnist slots=1\n",
		},
		"the TrainJob's image runs on the launcher and the node, its command only on the launcher": {
			runtime:  mpiRuntime(2, openMPI(1)).Obj(),
			trainJob: trainJob().Trainer(&trainer.Trainer{Image: ptr.To("mnist:2"), Command: []string{"mpirun", "python", "mnist.py"}}).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return wantJobSet(tj, rt, 2, "/root/.ssh", "OMPI_MCA_orte_default_hostfile").
					Container("launcher", "node", func(c *corev1.Container) {
						c.Image, c.Command = "mnist:2", []string{"mpirun", "python", "mnist.py"}
					}).
					Container("node", "node", func(c *corev1.Container) { c.Image = "mnist:2" }).Obj()
			},
			wantHostfile: "mnist-node-0-0.mnist slots=1\nmnist-node-0-1.mnist slots=1\n",
		},
		"resourcesPerNode go to the node pods; a launcher that is not a node keeps the runtime's resources": {
			runtime:  mpiRuntime(2, openMPI(8)).Obj(),
			trainJob: trainJob().Trainer(&trainer.Trainer{ResourcesPerNode: gpuNode.DeepCopy()}).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return wantJobSet(tj, rt, 2, "/root/.ssh", "OMPI_MCA_orte_default_hostfile").
					Container("launcher", "node", func(c *corev1.Container) { c.Resources = mpirunResources }).
					Container("node", "node", func(c *corev1.Container) { c.Resources = gpuNode }).Obj()
			},
			wantHostfile: "mnist-node-0-0.mnist slots=8\nmnist-node-0-1.mnist slots=8\n",
		},
		"with runLauncherAsNode the launcher is a node and gets resourcesPerNode too, merged into its own": {
			runtime:  mpiRuntime(2, &trainer.MPIMLPolicySource{RunLauncherAsNode: ptr.To(true)}).Obj(),
			trainJob: trainJob().Trainer(&trainer.Trainer{ResourcesPerNode: gpuNode.DeepCopy()}).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return wantJobSet(tj, rt, 1, "/root/.ssh", "OMPI_MCA_orte_default_hostfile").
					Container("launcher", "node", func(c *corev1.Container) {
						c.Resources = corev1.ResourceRequirements{Requests: mpirunResources.Requests, Limits: gpuNode.Limits}
					}).
					Container("node", "node", func(c *corev1.Container) { c.Resources = gpuNode }).Obj()
			},
			wantHostfile: "mnist-launcher-0-0.mnist slots=8\nmnist-node-0-0.mnist slots=8\n",
		},
		"a runtime of one slot per node runs one slot per GPU of the TrainJob's nodes": {
			runtime:  mpiRuntime(2, openMPI(1)).Obj(),
			trainJob: trainJob().Trainer(&trainer.Trainer{ResourcesPerNode: gpuNode.DeepCopy()}).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return wantJobSet(tj, rt, 2, "/root/.ssh", "OMPI_MCA_orte_default_hostfile").
					Container("launcher", "node", func(c *corev1.Container) { c.Resources = mpirunResources }).
					Container("node", "node", func(c *corev1.Container) { c.Resources = gpuNode }).Obj()
			},
			wantHostfile: "mnist-node-0-0.mnist slots=8\nmnist-node-0-1.mnist slots=8\n",
		},
		"the TrainJob's numProcPerNode of 1 is kept whatever the GPUs": {
			runtime:  mpiRuntime(2, openMPI(1)).Obj(),
			trainJob: trainJob().Trainer(&trainer.Trainer{ResourcesPerNode: gpuNode.DeepCopy()}).NumProcPerNode(intstr.FromInt32(1)).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return wantJobSet(tj, rt, 2, "/root/.ssh", "OMPI_MCA_orte_default_hostfile").
					Container("launcher", "node", func(c *corev1.Container) { c.Resources = mpirunResources }).
					Container("node", "node", func(c *corev1.Container) { c.Resources = gpuNode }).Obj()
			},
			wantHostfile: "mnist-node-0-0.mnist slots=1\nmnist-node-0-1.mnist slots=1\n",
		},
		"a runtime volume named like MPI's is replaced, not listed twice": {
			runtime: func() trainer.TrainingRuntimeSpec {
				rt := mpiRuntime(1, openMPI(1)).Obj()
				rt.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Volumes = []corev1.Volume{
					{Name: "mpi-hostfile", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				}
				return rt
			}(),
			trainJob: trainJob().Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return wantJobSet(tj, rt, 1, "/root/.ssh", "OMPI_MCA_orte_default_hostfile").
					PodSpec("launcher", func(s *corev1.PodSpec) {
						// MPI's hostfile ConfigMap takes the place of the runtime's emptyDir of that name.
						s.Volumes = []corev1.Volume{s.Volumes[2], s.Volumes[1]}
					}).Obj()
			},
			wantHostfile: "mnist-node-0-0.mnist slots=1\n",
		},
		"numProcPerNode auto is torchrun's, not a number of MPI slots": {
			runtime:  mpiRuntime(1, openMPI(1)).Obj(),
			trainJob: trainJob().NumProcPerNode(intstr.FromString("auto")).Obj(),
			wantErr:  `spec.trainer.numProcPerNode: Invalid value: "auto": MPI needs a positive integer: the slots per node`,
		},
		"numProcPerNode 0 is no slots": {
			runtime:  mpiRuntime(1, openMPI(1)).Obj(),
			trainJob: trainJob().NumProcPerNode(intstr.FromInt32(0)).Obj(),
			wantErr:  `spec.trainer.numProcPerNode: Invalid value: "0": MPI needs a positive integer: the slots per node`,
		},
		"a runtime numProcPerNode of 0 that did not come through the API server is no slots": {
			runtime:  mpiRuntime(1, openMPI(0)).Obj(),
			trainJob: trainJob().Obj(),
			wantErr:  `ClusterTrainingRuntime "mpi": spec.mlPolicy.mpi.numProcPerNode: Invalid value: 0: must be at least 1`,
		},
		"an unknown MPI implementation has no hostfile syntax": {
			runtime:  mpiRuntime(1, &trainer.MPIMLPolicySource{MPIImplementation: ptr.To[trainer.MPIImplementation]("MVAPICH")}).Obj(),
			trainJob: trainJob().Obj(),
			wantErr:  `ClusterTrainingRuntime "mpi": spec.mlPolicy.mpi.mpiImplementation: Unsupported value: "MVAPICH": supported values: "OpenMPI", "Intel", "MPICH"`,
		},
		"a runtime without a node job cannot be built": {
			runtime: mpiRuntime(1, openMPI(1)).ReplicatedJobs(
				utiltesting.ReplicatedJob("launcher", trainer.AncestorTrainer, "node"),
				utiltesting.ReplicatedJob("worker", "", "node")).Obj(),
			trainJob: trainJob().Obj(),
			wantErr:  `ClusterTrainingRuntime "mpi": spec.template.spec.replicatedJobs: Required value: MPI runs its processes on the pods of a replicated job named "node"`,
		},
		"a node job without a node container cannot be built": {
			runtime: mpiRuntime(1, openMPI(1)).ReplicatedJobs(
				utiltesting.ReplicatedJob("launcher", trainer.AncestorTrainer, "node"),
				utiltesting.ReplicatedJob("node", "", "sshd")).Obj(),
			trainJob: trainJob().Obj(),
			wantErr:  `ClusterTrainingRuntime "mpi": spec.template.spec.replicatedJobs[1].template.spec.template.spec.containers: Required value: the node job needs a container named "node" to run sshd`,
		},
		"a launcher named node cannot be built": {
			runtime:  mpiRuntime(1, openMPI(1)).ReplicatedJobs(utiltesting.ReplicatedJob("node", trainer.AncestorTrainer, "node")).Obj(),
			trainJob: trainJob().Obj(),
			wantErr:  `ClusterTrainingRuntime "mpi": spec.template.spec.replicatedJobs[0].name: Invalid value: "node": the MPI launcher, the job labelled trainer.kubeflow.org/trainjob-ancestor-step=trainer, needs a name of its own: "node" is the node job's`,
		},
		"a TrainJob that sets the OpenMPI hostfile variable cannot be built": {
			runtime:  mpiRuntime(1, openMPI(1)).Obj(),
			trainJob: trainJob().Trainer(&trainer.Trainer{Env: []corev1.EnvVar{{Name: "OMPI_MCA_orte_default_hostfile", Value: "/mine"}}}).Obj(),
			wantErr:  "spec.trainer.env[0].name: Forbidden: OMPI_MCA_orte_default_hostfile is set by the mpi framework and may not be set by hand",
		},
		"an Intel runtime reserves the other implementations' variables too": {
			runtime:  mpiRuntime(1, &trainer.MPIMLPolicySource{MPIImplementation: ptr.To(trainer.MPIImplementationIntel)}).Obj(),
			trainJob: trainJob().Trainer(&trainer.Trainer{Env: []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "HYDRA_HOST_FILE", Value: "/mine"}}}).Obj(),
			wantErr:  "spec.trainer.env[1].name: Forbidden: HYDRA_HOST_FILE is set by the mpi framework and may not be set by hand",
		},
		"an override that sets the Intel hostfile variable on the launcher cannot be built": {
			runtime:  mpiRuntime(1, openMPI(1)).Obj(),
			trainJob: trainJob().PodSpecOverrides(trainer.PodSpecOverride{TargetJobs: []string{"launcher"}, PodSpecPatch: trainer.PodSpecPatch{Containers: []trainer.ContainerPatch{{Name: "node", Env: []corev1.EnvVar{{Name: "I_MPI_HYDRA_HOST_FILE", Value: "/mine"}}}}}}).Obj(),
			wantErr:  "spec.podSpecOverrides[0].containers[0].env[0].name: Forbidden: I_MPI_HYDRA_HOST_FILE is set by the mpi framework and may not be set by hand",
		},
		"a runtime whose launcher sets the hostfile variable cannot be built": {
			runtime: func() trainer.TrainingRuntimeSpec {
				rt := mpiRuntime(1, openMPI(1)).Obj()
				c := &rt.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[0]
				c.Env = []corev1.EnvVar{{Name: "OMPI_MCA_orte_default_hostfile", Value: "/etc/hosts"}}
				return rt
			}(),
			trainJob: trainJob().Obj(),
			wantErr:  `ClusterTrainingRuntime "mpi": spec.template.spec.replicatedJobs[0].template.spec.template.spec.containers[0].env[0].name: Forbidden: OMPI_MCA_orte_default_hostfile is set by the mpi framework and may not be set by hand`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			runtimeBefore, trainJobBefore := tc.runtime.DeepCopy(), tc.trainJob.DeepCopy()

			children, err := buildMPI(tc.trainJob, tc.runtime)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			got := utiltesting.FromApplyConfiguration[jobsetv1alpha2.JobSet](t, children.JobSet)
			if diff := cmp.Diff(tc.want(trainJobBefore, *runtimeBefore), got); diff != "" {
				t.Errorf("JobSet (-want +got):\n%s", diff)
			}
			require.Len(t, children.Create, 2, "the SSH key Secret and the hostfile ConfigMap are the children beside the JobSet")
			require.IsType(t, &corev1.Secret{}, children.Create[0])
			if diff := cmp.Diff(wantHostfile(tc.wantHostfile), children.Create[1]); diff != "" {
				t.Errorf("hostfile ConfigMap (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(runtimeBefore, &tc.runtime); diff != "" {
				t.Errorf("building changed the runtime (-before +after):\n%s", diff)
			}
		})
	}
}

// TestApplyTwice checks that MPI replaces its own volumes, mounts and env instead of adding them
// again, so that a JobSet that already has them is left as it is.
func TestApplyTwice(t *testing.T) {
	spec := mpiRuntime(2, openMPI(2)).Obj()
	b := &framework.Draft{
		TrainJob: trainJob().Obj(),
		Runtime:  &trainingruntime.Runtime{Kind: trainer.ClusterTrainingRuntimeKind, Name: "mpi", Spec: &spec},
		JobSet:   &jobsetv1alpha2.JobSet{Spec: *spec.Template.Spec.DeepCopy()},
		NumNodes: 2,
	}
	b.SetTrainer(0, 0)
	require.NoError(t, New().Apply(b))
	once := b.JobSet.DeepCopy()
	require.NoError(t, New().Apply(b))
	if diff := cmp.Diff(once, b.JobSet); diff != "" {
		t.Errorf("applying MPI again changed the JobSet (-once +twice):\n%s", diff)
	}
}

func TestSelects(t *testing.T) {
	cases := map[string]struct {
		policy *trainer.MLPolicy
		want   bool
	}{
		"a runtime without a policy":    {policy: nil, want: false},
		"a runtime with only numNodes":  {policy: &trainer.MLPolicy{NumNodes: ptr.To[int32](2)}, want: false},
		"a torch runtime":               {policy: &trainer.MLPolicy{MLPolicySource: trainer.MLPolicySource{Torch: &trainer.TorchMLPolicySource{}}}, want: false},
		"an MPI runtime with no values": {policy: &trainer.MLPolicy{MLPolicySource: trainer.MLPolicySource{MPI: &trainer.MPIMLPolicySource{}}}, want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			require.Equal(t, tc.want, New().Selects(tc.policy))
		})
	}
}

// TestOpenMPIDefaultsYieldToWhatTheTrainJobSets: OpenMPI's launcher gets the settings that make
// the hostfile's pod names work (keep them whole, retry ssh), unless the runtime or TrainJob set
// them otherwise; Intel's and MPICH's launchers get none of OpenMPI's.
func TestOpenMPIDefaultsYieldToWhatTheTrainJobSets(t *testing.T) {
	launcherEnv := func(t *testing.T, tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) map[string]string {
		children, err := buildMPI(tj, rt)
		require.NoError(t, err)
		env := map[string]string{}
		for _, e := range children.JobSet.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[0].Env {
			env[*e.Name] = ptr.Deref(e.Value, "")
		}
		return env
	}
	tj := trainJob().Obj()
	tj.Spec.Trainer = &trainer.Trainer{Env: []corev1.EnvVar{{Name: "OMPI_MCA_plm_rsh_args", Value: "-o ConnectionAttempts=30"}}}
	env := launcherEnv(t, tj, mpiRuntime(2, openMPI(3)).Obj())
	assert.Equal(t, "-o ConnectionAttempts=30", env["OMPI_MCA_plm_rsh_args"])
	assert.Equal(t, "true", env["OMPI_MCA_orte_keep_fqdn_hostnames"])
	assert.Equal(t, "3", env["OMPI_MCA_orte_set_default_slots"])

	env = launcherEnv(t, trainJob().Obj(), mpiRuntime(2, &trainer.MPIMLPolicySource{MPIImplementation: ptr.To(trainer.MPIImplementationIntel)}).Obj())
	assert.NotContains(t, env, "OMPI_MCA_orte_keep_fqdn_hostnames")
	assert.Equal(t, "/etc/mpi/hostfile", env["I_MPI_HYDRA_HOST_FILE"])
}

// The node pods claim the TrainJob's devices: the node job's, and the launcher's only when it
// runs as a node (it only runs mpirun otherwise, with the runtime's resources).
func TestMPINodesClaimTheDevices(t *testing.T) {
	gpus := []trainer.TrainerResourceClaim{{Name: "gpus", ResourceClaimTemplateName: ptr.To("h100-x8")}}
	for _, asNode := range []bool{false, true} {
		children, err := buildMPI(trainJob().Trainer(&trainer.Trainer{ResourceClaimsPerNode: gpus}).Obj(),
			mpiRuntime(3, &trainer.MPIMLPolicySource{RunLauncherAsNode: ptr.To(asNode)}).Obj())
		require.NoError(t, err)
		js := utiltesting.FromApplyConfiguration[jobsetv1alpha2.JobSet](t, children.JobSet)
		for _, job := range js.Spec.ReplicatedJobs {
			pod := job.Template.Spec.Template.Spec
			if job.Name == "launcher" && !asNode {
				require.Empty(t, pod.ResourceClaims, "launcher, runLauncherAsNode=%t", asNode)
				require.Empty(t, pod.Containers[0].Resources.Claims, "launcher, runLauncherAsNode=%t", asNode)
				continue
			}
			require.Equal(t, []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: ptr.To("h100-x8")}}, pod.ResourceClaims, "%s, runLauncherAsNode=%t", job.Name, asNode)
			require.Equal(t, []corev1.ResourceClaim{{Name: "gpus"}}, pod.Containers[0].Resources.Claims, "%s, runLauncherAsNode=%t", job.Name, asNode)
		}
	}
}
