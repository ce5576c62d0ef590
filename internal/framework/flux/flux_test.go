package flux

import (
	"os/exec"
	"regexp"
	"strings"
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
	"github.com/trainjob/operator/internal/pipeline"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/internal/trainingruntime"
)

func trainJob() *utiltesting.TrainJobWrapper {
	return utiltesting.MakeTrainJob("lammps", "ns").UID("lammps-uid")
}

// fluxRuntime is a Flux runtime as upstream ships it: one replicated job "node", the trainer,
// whose container "node" runs ubuntu, on numNodes nodes of tasks tasks each.
func fluxRuntime(numNodes, tasks int32) *utiltesting.RuntimeSpecWrapper {
	rt := utiltesting.MakeRuntimeSpec().NumNodes(numNodes).Flux(&trainer.FluxMLPolicySource{NumProcPerNode: ptr.To(tasks)})
	rt.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[0].Image = "ubuntu:22.04"
	return rt
}

// withNode changes the runtime's trainer container.
func withNode(rt *utiltesting.RuntimeSpecWrapper, change func(*corev1.Container)) *utiltesting.RuntimeSpecWrapper {
	change(&rt.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[0])
	return rt
}

func gpus(n string) *corev1.ResourceRequirements {
	return &corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(n)}}
}

func env(pairs ...string) []corev1.EnvVar {
	var vars []corev1.EnvVar
	for i := 0; i < len(pairs); i += 2 {
		vars = append(vars, corev1.EnvVar{Name: pairs[i], Value: pairs[i+1]})
	}
	return vars
}

// wantJobSet is the JobSet of a Flux TrainJob "lammps" whose trainer job is job: its pods get the
// flux-installer init container of image, Flux's volumes and the trainer container's mounts, and
// the trainer container runs the entrypoint with command.
func wantJobSet(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec, job string, nodes int32, image, command string) *utiltesting.JobSetWrapper {
	return utiltesting.MakeJobSet(tj, rt).NumNodes(job, nodes).
		PodSpec(job, func(s *corev1.PodSpec) {
			s.Volumes = append(s.Volumes,
				corev1.Volume{Name: "spack-install", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				corev1.Volume{Name: "flux-install", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				corev1.Volume{Name: "flux-entrypoint", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "lammps-flux-entrypoint"}, DefaultMode: ptr.To[int32](0o755),
				}}},
				corev1.Volume{Name: "dshm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
				corev1.Volume{Name: "flux-curve", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
					SecretName: "lammps-flux-curve", DefaultMode: ptr.To[int32](0o400),
				}}},
			)
			s.InitContainers = append(s.InitContainers, corev1.Container{
				Name:    "flux-installer",
				Image:   image,
				Command: []string{"/bin/bash", "/etc/flux-config/init.sh"},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "flux-install", MountPath: "/mnt/flux"},
					{Name: "flux-entrypoint", MountPath: "/etc/flux-config", ReadOnly: true},
				},
			})
		}).
		Container(job, "node", func(c *corev1.Container) {
			c.VolumeMounts = append(c.VolumeMounts,
				corev1.VolumeMount{Name: "flux-install", MountPath: "/mnt/flux"},
				corev1.VolumeMount{Name: "spack-install", MountPath: "/opt/software"},
				corev1.VolumeMount{Name: "flux-entrypoint", MountPath: "/etc/flux-config", ReadOnly: true},
				corev1.VolumeMount{Name: "flux-curve", MountPath: "/curve", ReadOnly: true},
				corev1.VolumeMount{Name: "dshm", MountPath: "/dev/shm"},
			)
			c.Command, c.Args = append([]string{"/bin/bash", "/etc/flux-config/entrypoint.sh"}, strings.Fields(command)...), nil
		})
}

// wantBroker is the brokers' configuration of a cluster of hosts that bind device and reach each
// other as <host>.<subdomain>.
func wantBroker(device, subdomain, hosts, queuePolicy string) string {
	return `[access]
allow-guest-user = true
allow-root-owner = true

# The cluster's resources, which the trainer container encodes with flux R encode.
[resource]
path = "/mnt/flux/config/etc/flux/system/R"

[bootstrap]
curve_cert = "/mnt/flux/config/etc/curve/curve.cert"
default_port = 8050
default_bind = "tcp://` + device + `:%p"
default_connect = "tcp://%h.` + subdomain + `:%p"
hosts = [
  { host = "` + hosts + `" },
]

[archive]
dbpath = "/mnt/flux/config/var/lib/flux/job-archive.sqlite"
period = "1m"
busytimeout = "50s"

[sched-fluxion-qmanager]
queue-policy = "` + queuePolicy + `"
`
}

// cluster is what the scripts tell Flux about the cluster.
type cluster struct {
	hosts, broker, leadHost string
	// resources are flux R encode's options; flags are flux run's.
	resources, flags string
}

// clusterOf reads the cluster out of the scripts.
func clusterOf(t *testing.T, cm *corev1.ConfigMap) cluster {
	t.Helper()
	find := func(script, pattern string) string {
		m := regexp.MustCompile(pattern).FindStringSubmatch(cm.Data[script])
		require.NotNil(t, m, "%s has no match of %s:\n%s", script, pattern, cm.Data[script])
		return m[1]
	}
	return cluster{
		hosts:     find("init.sh", `(?m)^echo "(.*)" > \$\{configroot\}/etc/flux/system/hostlist$`),
		broker:    find("init.sh", `(?s)<< 'BROKER'\n(.*)BROKER\n`),
		leadHost:  find("entrypoint.sh", `(?m)^if \[ "\$\(hostname\)" = "(.*)" \]; then$`),
		resources: find("entrypoint.sh", `(?m)^flux R encode --hosts=\$\{hosts\} (.*) > /tmp/R$`),
		flags:     find("entrypoint.sh", `(?m)^    flags="(.*)"$`),
	}
}

func buildFlux(tj *trainer.TrainJob, spec trainer.TrainingRuntimeSpec) (*pipeline.Children, error) {
	return pipeline.Build(tj, &trainingruntime.Runtime{Kind: trainer.ClusterTrainingRuntimeKind, Name: "flux", Spec: &spec}, New())
}

func TestFlux(t *testing.T) {
	defaults := func(hosts string) string { return wantBroker("eth0", "lammps", hosts, "fcfs") }
	cases := map[string]struct {
		runtime  trainer.TrainingRuntimeSpec
		trainJob *trainer.TrainJob
		want     func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet
		cluster  cluster
		wantErr  string
	}{
		"upstream's runtime: one node of one task, the TrainJob's command and args on one line": {
			runtime:  fluxRuntime(1, 1).Obj(),
			trainJob: trainJob().Trainer(&trainer.Trainer{Command: []string{"lmp", "-in"}, Args: []string{"in.reaxff.hns", "-nocite"}}).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return wantJobSet(tj, rt, "node", 1, DefaultViewImage, "lmp -in in.reaxff.hns -nocite").Obj()
			},
			cluster: cluster{
				hosts: "lammps-node-0-[0]", broker: defaults("lammps-node-0-[0]"), leadHost: "lammps-node-0-0",
				resources: "--cores=0", flags: "-N 1 -n 1",
			},
		},
		"the TrainJob's numNodes and numProcPerNode size the cluster": {
			runtime:  fluxRuntime(1, 1).Obj(),
			trainJob: trainJob().NumNodes(4).NumProcPerNode(intstr.FromString("2")).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return wantJobSet(tj, rt, "node", 4, DefaultViewImage, "").Obj()
			},
			cluster: cluster{
				hosts: "lammps-node-0-[0-3]", broker: defaults("lammps-node-0-[0-3]"), leadHost: "lammps-node-0-0",
				resources: "--cores=0-1", flags: "-N 4 -n 8",
			},
		},
		"a policy that did not come through the API server runs one task per node": {
			runtime:  utiltesting.MakeRuntimeSpec().NumNodes(2).Flux(&trainer.FluxMLPolicySource{}).Obj(),
			trainJob: trainJob().Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return wantJobSet(tj, rt, "node", 2, DefaultViewImage, "").Obj()
			},
			cluster: cluster{
				hosts: "lammps-node-0-[0-1]", broker: defaults("lammps-node-0-[0-1]"), leadHost: "lammps-node-0-0",
				resources: "--cores=0", flags: "-N 2 -n 2",
			},
		},
		"one task per node gets all of the node's GPUs, as upstream": {
			runtime:  fluxRuntime(2, 1).Obj(),
			trainJob: trainJob().Trainer(&trainer.Trainer{ResourcesPerNode: gpus("4")}).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return wantJobSet(tj, rt, "node", 2, DefaultViewImage, "").
					Container("node", "node", func(c *corev1.Container) { c.Resources = *gpus("4") }).Obj()
			},
			cluster: cluster{
				hosts: "lammps-node-0-[0-1]", broker: defaults("lammps-node-0-[0-1]"), leadHost: "lammps-node-0-0",
				resources: "--cores=0 --gpu=0-3", flags: "-N 2 -n 2 -g 4",
			},
		},
		"a node's GPUs are shared evenly by its tasks": {
			runtime:  withNode(fluxRuntime(2, 4), func(c *corev1.Container) { c.Resources = *gpus("8") }).Obj(),
			trainJob: trainJob().Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return wantJobSet(tj, rt, "node", 2, DefaultViewImage, "").Obj()
			},
			cluster: cluster{
				hosts: "lammps-node-0-[0-1]", broker: defaults("lammps-node-0-[0-1]"), leadHost: "lammps-node-0-0",
				resources: "--cores=0-3 --gpu=0-7", flags: "-N 2 -n 8 -g 2",
			},
		},
		"one GPU is the range 0": {
			runtime:  fluxRuntime(1, 1).Obj(),
			trainJob: trainJob().Trainer(&trainer.Trainer{ResourcesPerNode: gpus("1")}).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return wantJobSet(tj, rt, "node", 1, DefaultViewImage, "").
					Container("node", "node", func(c *corev1.Container) { c.Resources = *gpus("1") }).Obj()
			},
			cluster: cluster{
				hosts: "lammps-node-0-[0]", broker: defaults("lammps-node-0-[0]"), leadHost: "lammps-node-0-0",
				resources: "--cores=0 --gpu=0", flags: "-N 1 -n 1 -g 1",
			},
		},
		"the settings in the runtime's env, overridden by the TrainJob's": {
			runtime: withNode(fluxRuntime(2, 1), func(c *corev1.Container) {
				c.Env = env("FLUX_VIEW_IMAGE", "ghcr.io/converged-computing/flux-view-rocky:tag-9", "FLUX_QUEUE_POLICY", "easy")
			}).Obj(),
			trainJob: trainJob().Trainer(&trainer.Trainer{Env: env("FLUX_VIEW_IMAGE", "flux-view:mine", "FLUX_NETWORK_DEVICE", "ib0")}).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return wantJobSet(tj, rt, "node", 2, "flux-view:mine", "").
					Container("node", "node", func(c *corev1.Container) {
						c.Env = env("FLUX_VIEW_IMAGE", "flux-view:mine", "FLUX_QUEUE_POLICY", "easy", "FLUX_NETWORK_DEVICE", "ib0")
					}).Obj()
			},
			cluster: cluster{
				hosts: "lammps-node-0-[0-1]", broker: wantBroker("ib0", "lammps", "lammps-node-0-[0-1]", "easy"), leadHost: "lammps-node-0-0",
				resources: "--cores=0", flags: "-N 2 -n 2",
			},
		},
		"the brokers bind every interface with *": {
			runtime:  fluxRuntime(1, 1).Obj(),
			trainJob: trainJob().Trainer(&trainer.Trainer{Env: env("FLUX_NETWORK_DEVICE", "*")}).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return wantJobSet(tj, rt, "node", 1, DefaultViewImage, "").
					Container("node", "node", func(c *corev1.Container) { c.Env = env("FLUX_NETWORK_DEVICE", "*") }).Obj()
			},
			cluster: cluster{
				hosts: "lammps-node-0-[0]", broker: wantBroker("*", "lammps", "lammps-node-0-[0]", "fcfs"), leadHost: "lammps-node-0-0",
				resources: "--cores=0", flags: "-N 1 -n 1",
			},
		},
		"the hosts are the trainer job's pods, reached through the runtime's subdomain": {
			runtime: func() trainer.TrainingRuntimeSpec {
				rt := fluxRuntime(3, 1).ReplicatedJobs(utiltesting.ReplicatedJob("worker", trainer.AncestorTrainer, "node")).Obj()
				rt.Template.Spec.Network = &jobsetv1alpha2.Network{Subdomain: "hpc"}
				return rt
			}(),
			trainJob: trainJob().Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				w := wantJobSet(tj, rt, "worker", 3, DefaultViewImage, "")
				w.Spec.Network = &jobsetv1alpha2.Network{Subdomain: "hpc", EnableDNSHostnames: ptr.To(true), PublishNotReadyAddresses: ptr.To(true)}
				return w.Obj()
			},
			cluster: cluster{
				hosts: "lammps-worker-0-[0-2]", broker: wantBroker("eth0", "hpc", "lammps-worker-0-[0-2]", "fcfs"), leadHost: "lammps-worker-0-0",
				resources: "--cores=0", flags: "-N 3 -n 3",
			},
		},
		"the runtime's command and args when the TrainJob sets none; its init containers run first": {
			runtime: func() trainer.TrainingRuntimeSpec {
				rt := withNode(fluxRuntime(1, 1), func(c *corev1.Container) { c.Command, c.Args = []string{"hostname"}, []string{"-f"} }).Obj()
				pod := &rt.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec
				pod.InitContainers = []corev1.Container{{Name: "fetch", Image: "busybox"}}
				return rt
			}(),
			trainJob: trainJob().Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return wantJobSet(tj, rt, "node", 1, DefaultViewImage, "hostname -f").Obj()
			},
			cluster: cluster{
				hosts: "lammps-node-0-[0]", broker: defaults("lammps-node-0-[0]"), leadHost: "lammps-node-0-0",
				resources: "--cores=0", flags: "-N 1 -n 1",
			},
		},
		"a volume of a reserved name in another job's pods is that job's own": {
			runtime: fluxRuntime(1, 1).ReplicatedJobs(
				utiltesting.ReplicatedJob("node", trainer.AncestorTrainer, "node"),
				utiltesting.ReplicatedJob("dataset-initializer", trainer.AncestorDatasetInitializer, "dataset-initializer"),
			).Obj(),
			trainJob: trainJob().PodSpecOverrides(trainer.PodSpecOverride{TargetJobs: []string{"dataset-initializer"}, PodSpecPatch: trainer.PodSpecPatch{
				Volumes: []corev1.Volume{{Name: "dshm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			}}).Obj(),
			want: func(tj *trainer.TrainJob, rt trainer.TrainingRuntimeSpec) *jobsetv1alpha2.JobSet {
				return wantJobSet(tj, rt, "node", 1, DefaultViewImage, "").
					PodSpec("dataset-initializer", func(s *corev1.PodSpec) {
						s.Volumes = []corev1.Volume{{Name: "dshm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
					}).Obj()
			},
			cluster: cluster{
				hosts: "lammps-node-0-[0]", broker: defaults("lammps-node-0-[0]"), leadHost: "lammps-node-0-0",
				resources: "--cores=0", flags: "-N 1 -n 1",
			},
		},

		"numProcPerNode auto is torchrun's, not a number of Flux tasks": {
			runtime:  fluxRuntime(1, 1).Obj(),
			trainJob: trainJob().NumProcPerNode(intstr.FromString("auto")).Obj(),
			wantErr:  `spec.trainer.numProcPerNode: Invalid value: "auto": Flux needs a positive integer: the tasks per node`,
		},
		"the TrainJob's numProcPerNode 0 is no tasks": {
			runtime:  fluxRuntime(1, 1).Obj(),
			trainJob: trainJob().NumProcPerNode(intstr.FromInt32(0)).Obj(),
			wantErr:  `spec.trainer.numProcPerNode: Invalid value: "0": Flux needs a positive integer: the tasks per node`,
		},
		"a runtime numProcPerNode of 0 that did not come through the API server is no tasks": {
			runtime:  fluxRuntime(1, 0).Obj(),
			trainJob: trainJob().Obj(),
			wantErr:  `ClusterTrainingRuntime "flux": spec.mlPolicy.flux.numProcPerNode: Invalid value: 0: must be at least 1`,
		},
		"the TrainJob's tasks cannot share the runtime's GPUs evenly": {
			runtime:  withNode(fluxRuntime(1, 1), func(c *corev1.Container) { c.Resources = *gpus("4") }).Obj(),
			trainJob: trainJob().NumProcPerNode(intstr.FromInt32(3)).Obj(),
			wantErr:  `spec.trainer.numProcPerNode: Invalid value: "3": Flux gives every task of a node the same number of GPUs: the node's 4 GPUs cannot be shared by 3 tasks`,
		},
		"the runtime's tasks cannot share the TrainJob's GPUs evenly": {
			runtime:  fluxRuntime(1, 2).Obj(),
			trainJob: trainJob().Trainer(&trainer.Trainer{ResourcesPerNode: gpus("3")}).Obj(),
			wantErr:  `spec.trainer.resourcesPerNode: Invalid value: "3 GPUs": Flux gives every task of a node the same number of GPUs`,
		},
		"the runtime's tasks cannot share its GPUs evenly": {
			runtime:  withNode(fluxRuntime(1, 2), func(c *corev1.Container) { c.Resources = *gpus("1") }).Obj(),
			trainJob: trainJob().Obj(),
			wantErr:  `ClusterTrainingRuntime "flux": spec.mlPolicy.flux.numProcPerNode: Invalid value: 2: Flux gives every task of a node the same number of GPUs: the node's 1 GPUs cannot be shared by 2 tasks`,
		},

		"a queue policy Fluxion does not have": {
			runtime:  fluxRuntime(1, 1).Obj(),
			trainJob: trainJob().Trainer(&trainer.Trainer{Env: env("A", "1", "FLUX_QUEUE_POLICY", "lifo")}).Obj(),
			wantErr:  `spec.trainer.env[1].value: Unsupported value: "lifo": supported values: "fcfs", "easy", "hybrid", "conservative"`,
		},
		"a network device that is no interface name, in the runtime": {
			runtime:  withNode(fluxRuntime(1, 1), func(c *corev1.Container) { c.Env = env("FLUX_NETWORK_DEVICE", `eth0" ]`) }).Obj(),
			trainJob: trainJob().Obj(),
			wantErr:  `ClusterTrainingRuntime "flux": spec.template.spec.replicatedJobs[0].template.spec.template.spec.containers[0].env[0].value: Invalid value: "eth0\" ]": must be a network interface name`,
		},
		"an empty view image": {
			runtime:  fluxRuntime(1, 1).Obj(),
			trainJob: trainJob().Trainer(&trainer.Trainer{Env: env("FLUX_VIEW_IMAGE", "")}).Obj(),
			wantErr:  `spec.trainer.env[0].value: Invalid value: "": must be an image name`,
		},
		"a setting read from elsewhere when the pod starts": {
			runtime: fluxRuntime(1, 1).Obj(),
			trainJob: trainJob().Trainer(&trainer.Trainer{Env: []corev1.EnvVar{{Name: "FLUX_VIEW_IMAGE", ValueFrom: &corev1.EnvVarSource{
				ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "flux"}, Key: "image"},
			}}}}).Obj(),
			wantErr: `spec.trainer.env[0].valueFrom: Invalid value: "": Flux reads FLUX_VIEW_IMAGE when the JobSet is built: give it a value`,
		},
		"a runtime whose pods have no DNS host names": {
			runtime: func() trainer.TrainingRuntimeSpec {
				rt := fluxRuntime(1, 1).Obj()
				rt.Template.Spec.Network = &jobsetv1alpha2.Network{EnableDNSHostnames: ptr.To(false)}
				return rt
			}(),
			trainJob: trainJob().Obj(),
			wantErr:  `ClusterTrainingRuntime "flux": spec.template.spec.network.enableDNSHostnames: Invalid value: false: Flux finds its lead broker by the pods' host names`,
		},
		"a runtime with an init container of the installer's name": {
			runtime: func() trainer.TrainingRuntimeSpec {
				rt := fluxRuntime(1, 1).Obj()
				rt.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: "flux-installer", Image: "mine"}}
				return rt
			}(),
			trainJob: trainJob().Obj(),
			wantErr:  `ClusterTrainingRuntime "flux": spec.template.spec.replicatedJobs[0].template.spec.template.spec.initContainers[0].name: Forbidden: the flux framework adds an init container named flux-installer to the trainer's pods: no other container may have that name`,
		},
		"a runtime with a sidecar of the installer's name": {
			runtime: func() trainer.TrainingRuntimeSpec {
				rt := fluxRuntime(1, 1).Obj()
				pod := &rt.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec
				pod.Containers = append(pod.Containers, corev1.Container{Name: "flux-installer", Image: "mine"})
				return rt
			}(),
			trainJob: trainJob().Obj(),
			wantErr:  `spec.template.spec.replicatedJobs[0].template.spec.template.spec.containers[1].name: Forbidden: the flux framework adds an init container named flux-installer`,
		},
		"a runtime with a volume of a reserved name": {
			runtime: func() trainer.TrainingRuntimeSpec {
				rt := fluxRuntime(1, 1).Obj()
				rt.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "flux-curve"}}
				return rt
			}(),
			trainJob: trainJob().Obj(),
			wantErr:  `ClusterTrainingRuntime "flux": spec.template.spec.replicatedJobs[0].template.spec.template.spec.volumes[0].name: Forbidden: the flux framework adds a volume named flux-curve to the trainer's pods: no other volume may have that name`,
		},
		"a runtime that mounts its own /dev/shm": {
			runtime: withNode(fluxRuntime(1, 1), func(c *corev1.Container) {
				c.VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}, {Name: "shm", MountPath: "/dev/shm"}}
			}).Obj(),
			trainJob: trainJob().Obj(),
			wantErr:  `ClusterTrainingRuntime "flux": spec.template.spec.replicatedJobs[0].template.spec.template.spec.containers[0].volumeMounts[1].mountPath: Forbidden: the flux framework mounts a volume at /dev/shm in the trainer container: nothing else may be mounted there`,
		},
		"a TrainJob whose overrides add a reserved volume, patch the installer and mount over Flux": {
			runtime: fluxRuntime(1, 1).Obj(),
			trainJob: trainJob().PodSpecOverrides(trainer.PodSpecOverride{PodSpecPatch: trainer.PodSpecPatch{
				Volumes:        []corev1.Volume{{Name: "data"}, {Name: "flux-install", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
				InitContainers: []trainer.ContainerPatch{{Name: "flux-installer", Env: env("A", "1")}},
				Containers:     []trainer.ContainerPatch{{Name: "node", VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/mnt/flux"}}}},
			}}).Obj(),
			wantErr: `[spec.podSpecOverrides[0].volumes[1].name: Forbidden: the flux framework adds a volume named flux-install to the trainer's pods: no other volume may have that name, ` +
				`spec.podSpecOverrides[0].initContainers[0].name: Forbidden: the flux framework adds an init container named flux-installer to the trainer's pods: no other container may have that name, ` +
				`spec.podSpecOverrides[0].containers[0].volumeMounts[0].mountPath: Forbidden: the flux framework mounts a volume at /mnt/flux in the trainer container: nothing else may be mounted there]`,
		},
		"a TrainJob whose runtime patch mounts over the certificate": {
			runtime: fluxRuntime(1, 1).Obj(),
			trainJob: trainJob().RuntimePatches(utiltesting.JobPatch("me", utiltesting.PodPatch("node", nil, &trainer.PodSpecPatch{
				Containers: []trainer.ContainerPatch{{Name: "node", VolumeMounts: []corev1.VolumeMount{{Name: "mine", MountPath: "/curve"}}}},
			}))).Obj(),
			wantErr: `spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec.containers[0].volumeMounts[0].mountPath: Forbidden: the flux framework mounts a volume at /curve`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			runtimeBefore, trainJobBefore := tc.runtime.DeepCopy(), tc.trainJob.DeepCopy()

			children, err := buildFlux(tc.trainJob, tc.runtime)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			got := utiltesting.FromApplyConfiguration[jobsetv1alpha2.JobSet](t, children.JobSet)
			if diff := cmp.Diff(tc.want(trainJobBefore, *runtimeBefore), got); diff != "" {
				t.Errorf("JobSet (-want +got):\n%s", diff)
			}
			require.Len(t, children.Create, 2, "the certificate Secret and the scripts ConfigMap are the children beside the JobSet")
			require.IsType(t, &corev1.Secret{}, children.Create[0])
			cm := children.Create[1].(*corev1.ConfigMap)
			if diff := cmp.Diff(tc.cluster, clusterOf(t, cm), cmp.AllowUnexported(cluster{})); diff != "" {
				t.Errorf("the cluster the scripts describe (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(runtimeBefore, &tc.runtime); diff != "" {
				t.Errorf("building changed the runtime (-before +after):\n%s", diff)
			}
		})
	}
}

// TestScriptsConfigMap checks the ConfigMap's metadata, that its scripts are valid bash, and that
// the hostlist names exactly the pods JobSet makes.
func TestScriptsConfigMap(t *testing.T) {
	children, err := buildFlux(trainJob().NumNodes(3).Obj(), fluxRuntime(1, 1).Obj())
	require.NoError(t, err)
	cm := children.Create[1].(*corev1.ConfigMap)
	want := metav1.ObjectMeta{
		Name:      "lammps-flux-entrypoint",
		Namespace: "ns",
		Labels:    map[string]string{"trainer.kubeflow.org/trainjob-name": "lammps"},
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "TrainJob", Name: "lammps", UID: "lammps-uid",
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
		}},
	}
	if diff := cmp.Diff(want, cm.ObjectMeta); diff != "" {
		t.Errorf("ConfigMap (-want +got):\n%s", diff)
	}
	require.ElementsMatch(t, []string{"init.sh", "entrypoint.sh"}, keys(cm.Data))

	// The pods' host names, as JobSet gives them: <jobset>-<job>-<job index>-<pod index>.
	hosts := clusterOf(t, cm).hosts
	m := regexp.MustCompile(`^(.*)\[0-(\d)\]$`).FindStringSubmatch(hosts)
	require.NotNil(t, m, hosts)
	assert.Equal(t, "lammps-node-0-", m[1])
	assert.Equal(t, "2", m[2])

	bash, err := exec.LookPath("bash")
	require.NoError(t, err, "bash checks the scripts' syntax")
	for name, script := range cm.Data {
		cmd := exec.Command(bash, "-n")
		cmd.Stdin = strings.NewReader(script)
		out, err := cmd.CombinedOutput()
		assert.NoError(t, err, "%s is not valid bash: %s", name, out)
	}
}

func keys[V any](m map[string]V) []string {
	var k []string
	for key := range m {
		k = append(k, key)
	}
	return k
}

func TestSelects(t *testing.T) {
	cases := map[string]struct {
		policy *trainer.MLPolicy
		want   bool
	}{
		"a runtime without a policy":   {policy: nil, want: false},
		"a runtime with only numNodes": {policy: &trainer.MLPolicy{NumNodes: ptr.To[int32](2)}, want: false},
		"an MPI runtime":               {policy: &trainer.MLPolicy{MLPolicySource: trainer.MLPolicySource{MPI: &trainer.MPIMLPolicySource{}}}, want: false},
		"a Flux runtime, flux: {}":     {policy: &trainer.MLPolicy{MLPolicySource: trainer.MLPolicySource{Flux: &trainer.FluxMLPolicySource{}}}, want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			require.Equal(t, tc.want, New().Selects(tc.policy))
		})
	}
}

// Each item of the command reaches flux run as one word, white space, line breaks and empty ones
// included: the SDK's bash -c "<script>" runs as written (upstream's one line split again at white
// space would run bash -c python3).
func TestTheCommandReachesFluxRunAsWritten(t *testing.T) {
	command := []string{"bash", "-c", "python3 train.py\necho done", ""}
	children, err := buildFlux(trainJob().Trainer(&trainer.Trainer{Command: command}).Obj(), fluxRuntime(1, 1).Obj())
	if err != nil {
		t.Fatal(err)
	}
	got := children.JobSet.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[0]
	want := append([]string{"/bin/bash", "/etc/flux-config/entrypoint.sh"}, command...)
	if diff := cmp.Diff(want, got.Command); diff != "" || got.Args != nil {
		t.Errorf("trainer command (-want +got):\n%s\nargs %q", diff, got.Args)
	}
}
