// Package flux runs TrainJobs under the Flux Framework, the HPC resource manager, as upstream
// Kubeflow Trainer's flux plugin does. Every pod of the trainer job gets Flux from an init
// container (the flux view image copies it into a shared volume) and starts one Flux broker;
// together the brokers are one Flux cluster, bootstrapped from a hostlist and a broker
// configuration that the operator writes into a ConfigMap, and secured by a ZeroMQ CURVE
// certificate that it generates into a Secret. The first pod's broker leads, and runs the
// TrainJob's command across the cluster with flux run.
package flux

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
	"github.com/trainjob/operator/internal/upsert"
)

// Name of the framework and its controller.
const Name = "flux"

// DefaultNumProcPerNode is mlPolicy.flux.numProcPerNode's default, which the API server applies;
// objects that did not come through it get it here.
const DefaultNumProcPerNode int32 = 1

// Settings the trainer container's environment may give, with their defaults: the runtime's
// values, overridden by spec.trainer.env. They are read when the JobSet is built.
const (
	// ViewImageEnv is the image of the flux-installer init container: a Spack view of Flux built
	// for the OS of the trainer image (converged-computing/flux-views has one per OS).
	ViewImageEnv     = "FLUX_VIEW_IMAGE"
	DefaultViewImage = "ghcr.io/converged-computing/flux-view-ubuntu:tag-jammy"
	// NetworkDeviceEnv is the interface the brokers bind (or * for every interface).
	NetworkDeviceEnv     = "FLUX_NETWORK_DEVICE"
	DefaultNetworkDevice = "eth0"
	// QueuePolicyEnv is the queue policy of Fluxion, Flux's scheduler.
	QueuePolicyEnv     = "FLUX_QUEUE_POLICY"
	DefaultQueuePolicy = "fcfs"
)

// queuePolicies are Fluxion's queue policies.
var queuePolicies = []string{"fcfs", "easy", "hybrid", "conservative"}

// What the framework adds to the trainer job's pods, named as upstream names them.
const (
	// InstallerContainer is the init container that copies Flux into InstallVolume.
	InstallerContainer = "flux-installer"

	// InstallVolume (an emptyDir) holds Flux and the cluster's configuration, at InstallPath.
	InstallVolume = "flux-install"
	InstallPath   = "/mnt/flux"
	// SoftwareVolume (an emptyDir) is where the trainer container puts back, at SoftwarePath,
	// the software the Flux view links to.
	SoftwareVolume = "spack-install"
	SoftwarePath   = "/opt/software"
	// ScriptsVolume is the ConfigMap of the scripts, at ScriptsPath in both containers.
	ScriptsVolume = "flux-entrypoint"
	ScriptsPath   = "/etc/flux-config"
	// CurveVolume is the CURVE certificate's Secret, at CurvePath in the trainer container.
	CurveVolume = "flux-curve"
	CurvePath   = "/curve"
	// ShmVolume (an emptyDir in memory) is the trainer container's /dev/shm, larger than the
	// container runtime's 64 MiB.
	ShmVolume = "dshm"
	ShmPath   = "/dev/shm"
)

// File modes of the mounted scripts (run with bash) and of the certificate, which the trainer
// container copies and makes readable by its own user only.
const (
	scriptsMode int32 = 0o755
	curveMode   int32 = 0o400
)

type flux struct{}

// The flux controller creates each TrainJob's certificate Secret once, and never reads Secrets:
// it patches one only to take over a Secret of the same name left by an earlier TrainJob. It
// writes the scripts' ConfigMaps.
// +kubebuilder:rbac:groups="",resources=secrets,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=create;patch

// New returns the flux framework.
func New() framework.Framework { return flux{} }

func (flux) Name() string { return Name }

// Selects runtimes with a Flux policy.
func (flux) Selects(p *trainer.MLPolicy) bool { return p != nil && p.Flux != nil }

// ReservedEnv is empty: Flux's settings in the environment are the user's to set.
func (flux) ReservedEnv() []string { return nil }

// ReadsNumProcPerNode: spec.trainer.numProcPerNode overrides the runtime's tasks per node.
func (flux) ReadsNumProcPerNode() {}

// ReservedPodParts are the init container, volumes and trainer mounts that Apply adds.
func (flux) ReservedPodParts() framework.ReservedPodParts {
	return framework.ReservedPodParts{
		InitContainers: []string{InstallerContainer},
		Volumes:        []string{SoftwareVolume, InstallVolume, ScriptsVolume, ShmVolume, CurveVolume},
		MountPaths:     []string{InstallPath, SoftwarePath, ScriptsPath, CurvePath, ShmPath},
	}
}

// Apply installs Flux in the trainer job's pods and wraps the trainer's command in the
// entrypoint that starts the Flux cluster, and adds the scripts' ConfigMap and the certificate's
// Secret.
func (flux) Apply(b *framework.Draft) error {
	tasks, err := numProcPerNode(b)
	if err != nil {
		return err
	}
	set, err := settingsOf(b)
	if err != nil {
		return err
	}
	gpusPerTask, err := gpusPerTask(b, tasks)
	if err != nil {
		return err
	}
	command := commandLine(b)
	if n := b.JobSet.Spec.Network; n != nil && n.EnableDNSHostnames != nil && !*n.EnableDNSHostnames {
		return b.RuntimeError(field.Invalid(field.NewPath("spec", "template", "spec", "network", "enableDNSHostnames"), false,
			"Flux finds its lead broker by the pods' host names and the brokers each other by their DNS names: JobSet's DNS host names must stay on"))
	}
	// The hostlist names the pods by their index.
	b.TrainerJob().Template.Spec.CompletionMode = ptr.To(batchv1.IndexedCompletion)

	secret, err := curveSecret(b)
	if err != nil {
		return err
	}
	configMap, err := scriptsConfigMap(b, set, tasks, gpusPerTask)
	if err != nil {
		return err
	}
	b.Create = append(b.Create, secret, configMap)

	pod := &b.TrainerJob().Template.Spec.Template.Spec
	pod.Volumes = upsert.ByKey(pod.Volumes, upsert.VolumeName,
		corev1.Volume{Name: SoftwareVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		corev1.Volume{Name: InstallVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		corev1.Volume{Name: ScriptsVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: configMap.Name}, DefaultMode: ptr.To(scriptsMode),
		}}},
		corev1.Volume{Name: ShmVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
		corev1.Volume{Name: CurveVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: secret.Name, DefaultMode: ptr.To(curveMode),
		}}},
	)
	pod.InitContainers = append(pod.InitContainers, corev1.Container{
		Name:    InstallerContainer,
		Image:   set[ViewImageEnv],
		Command: []string{"/bin/bash", ScriptsPath + "/" + InitScriptKey},
		VolumeMounts: []corev1.VolumeMount{
			{Name: InstallVolume, MountPath: InstallPath},
			{Name: ScriptsVolume, MountPath: ScriptsPath, ReadOnly: true},
		},
	})
	c := b.TrainerContainer()
	c.VolumeMounts = upsert.ByKey(c.VolumeMounts, upsert.MountPath,
		corev1.VolumeMount{Name: InstallVolume, MountPath: InstallPath},
		corev1.VolumeMount{Name: SoftwareVolume, MountPath: SoftwarePath},
		corev1.VolumeMount{Name: ScriptsVolume, MountPath: ScriptsPath, ReadOnly: true},
		corev1.VolumeMount{Name: CurveVolume, MountPath: CurvePath, ReadOnly: true},
		corev1.VolumeMount{Name: ShmVolume, MountPath: ShmPath},
	)
	c.Command = append([]string{"/bin/bash", ScriptsPath + "/" + EntrypointScriptKey}, command...)
	c.Args = nil
	return nil
}

// numProcPerNode is the number of Flux tasks per node: the TrainJob's spec.trainer.numProcPerNode,
// else the runtime's mlPolicy.flux.numProcPerNode, else 1. Flux needs a number: "auto", "cpu" and
// "gpu" are torchrun's.
func numProcPerNode(b *framework.Draft) (int32, error) {
	if t := b.TrainJob.Spec.Trainer; t != nil && t.NumProcPerNode != nil {
		n, err := strconv.ParseInt(t.NumProcPerNode.String(), 10, 32)
		if err != nil || n < 1 {
			return 0, field.Invalid(framework.TrainerPath.Child("numProcPerNode"), t.NumProcPerNode.String(),
				"Flux needs a positive integer: the tasks per node")
		}
		return int32(n), nil
	}
	n := ptr.Deref(b.MLPolicy().Flux.NumProcPerNode, DefaultNumProcPerNode)
	if n < 1 {
		return 0, b.RuntimeError(field.Invalid(framework.MLPolicyPath.Child("flux", "numProcPerNode"), n, "must be at least 1"))
	}
	return n, nil
}

// gpusPerTask is the GPUs flux run gives each task (its -g): the node's GPUs (the trainer
// container's, after the TrainJob's resourcesPerNode), shared evenly by its tasks. With one task
// per node, as by default, that is all of them, as upstream sets it.
func gpusPerTask(b *framework.Draft, tasks int32) (int64, error) {
	gpus := framework.GPUs(b.TrainerContainer())
	if gpus%int64(tasks) == 0 {
		return gpus / int64(tasks), nil
	}
	detail := fmt.Sprintf("Flux gives every task of a node the same number of GPUs: the node's %d GPUs cannot be shared by %d tasks", gpus, tasks)
	t := b.TrainJob.Spec.Trainer
	switch {
	case t != nil && t.NumProcPerNode != nil:
		return 0, field.Invalid(framework.TrainerPath.Child("numProcPerNode"), t.NumProcPerNode.String(), detail)
	case t != nil && t.ResourcesPerNode != nil:
		return 0, field.Invalid(framework.TrainerPath.Child("resourcesPerNode"), fmt.Sprintf("%d GPUs", gpus), detail)
	}
	return 0, b.RuntimeError(field.Invalid(framework.MLPolicyPath.Child("flux", "numProcPerNode"), tasks, detail))
}

// commandLine is the trainer container's command and args (the TrainJob's, else the runtime's):
// the entrypoint's arguments, which it hands to flux run as they are, each item one word (upstream
// joins them into one line that is split again at white space, so `bash -c "a b"` broke).
func commandLine(b *framework.Draft) []string {
	c := b.TrainerContainer()
	return slices.Concat(c.Command, c.Args)
}

// settings are Flux's settings, by env var name.
type settings map[string]string

// networkDevice is an interface name (at most 15 characters in Linux) or an IPv4 address.
var networkDevice = regexp.MustCompile(`^[A-Za-z0-9._-]{1,15}$`)

// settingsOf reads Flux's settings from the trainer container's env, which holds the runtime's
// values with spec.trainer.env's over them, and checks them: they are written into the pods and
// the brokers' configuration as they are.
func settingsOf(b *framework.Draft) (settings, error) {
	set := settings{ViewImageEnv: DefaultViewImage, NetworkDeviceEnv: DefaultNetworkDevice, QueuePolicyEnv: DefaultQueuePolicy}
	for _, e := range b.TrainerContainer().Env {
		if _, ok := set[e.Name]; !ok {
			continue
		}
		invalid := func(detail string) func(*field.Path) *field.Error {
			return func(env *field.Path) *field.Error { return field.Invalid(env.Child("value"), e.Value, detail) }
		}
		var at func(*field.Path) *field.Error
		switch {
		case e.ValueFrom != nil:
			at = func(env *field.Path) *field.Error {
				return field.Invalid(env.Child("valueFrom"), "", "Flux reads "+e.Name+" when the JobSet is built: give it a value")
			}
		case e.Name == ViewImageEnv && (e.Value == "" || strings.ContainsAny(e.Value, " \t\n\r")):
			at = invalid("must be an image name")
		case e.Name == NetworkDeviceEnv && e.Value != "*" && !networkDevice.MatchString(e.Value):
			at = invalid("must be a network interface name (such as eth0), an IPv4 address, or * for every interface")
		case e.Name == QueuePolicyEnv && !slices.Contains(queuePolicies, e.Value):
			at = func(env *field.Path) *field.Error {
				return field.NotSupported(env.Child("value"), e.Value, queuePolicies)
			}
		}
		if at != nil {
			return nil, settingError(b, e.Name, at)
		}
		set[e.Name] = e.Value
	}
	return set, nil
}

// settingError is the error that at makes at the env var that gave the trainer container its
// value of name: the TrainJob's spec.trainer.env entry, else the runtime's.
func settingError(b *framework.Draft, name string, at func(env *field.Path) *field.Error) error {
	named := func(e corev1.EnvVar) bool { return e.Name == name }
	if t := b.TrainJob.Spec.Trainer; t != nil {
		if i := slices.IndexFunc(t.Env, named); i >= 0 {
			return at(framework.TrainerPath.Child("env").Index(i))
		}
	}
	i := slices.IndexFunc(b.RuntimeTrainerContainer().Env, named)
	return b.RuntimeError(at(b.TrainerContainerPath().Child("env").Index(i)))
}
