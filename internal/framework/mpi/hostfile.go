package mpi

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
	"github.com/trainjob/operator/internal/upsert"
)

const (
	// HostfileConfigMapSuffix names a TrainJob's hostfile ConfigMap: <tj>-mpi-hostfile.
	HostfileConfigMapSuffix = "-mpi-hostfile"
	// HostfileKey is the ConfigMap's key, and so the file's name, of the hostfile.
	HostfileKey = "hostfile"
	// HostfileDir is where the hostfile ConfigMap is mounted in the launcher's trainer container.
	HostfileDir = "/etc/mpi"
	// HostfilePath is the hostfile in the launcher's trainer container, which mpirun reads.
	HostfilePath = HostfileDir + "/" + HostfileKey
	// HostfileVolume is the launcher pod's volume of the hostfile ConfigMap.
	HostfileVolume = "mpi-hostfile"
)

// Env vars that point each implementation's mpirun at the hostfile, so that a plain `mpirun`
// command finds the node pods.
const (
	OpenMPIHostfileEnv = "OMPI_MCA_orte_default_hostfile"
	IntelHostfileEnv   = "I_MPI_HYDRA_HOST_FILE"
	MPICHHostfileEnv   = "HYDRA_HOST_FILE"
)

// Defaults of OpenMPI's launcher, as upstream Trainer and mpi-operator set them; a runtime or
// TrainJob may set them otherwise. OpenMPI cuts a host name to its first label unless told to
// keep it, and the hostfile's names are the pods' `<pod>.<subdomain>`, whose first label
// resolves nowhere. ssh tries each node again while its sshd or its name is not up yet.
const (
	OpenMPIKeepFQDNEnv     = "OMPI_MCA_orte_keep_fqdn_hostnames"
	OpenMPIDefaultSlotsEnv = "OMPI_MCA_orte_set_default_slots"
	OpenMPIRSHArgsEnv      = "OMPI_MCA_plm_rsh_args"
	OpenMPIRSHArgs         = "-o ConnectionAttempts=10"
)

var hostfileEnvs = map[trainer.MPIImplementation]string{
	trainer.MPIImplementationOpenMPI: OpenMPIHostfileEnv,
	trainer.MPIImplementationIntel:   IntelHostfileEnv,
	trainer.MPIImplementationMPICH:   MPICHHostfileEnv,
}

// hostfile lists the node pods, each with its slots, in the implementation's syntax: the
// launcher first when it is a node, then the node job's pods in order.
func hostfile(b *framework.Draft, impl trainer.MPIImplementation, slots, nodePods int32, launcherAsNode bool) string {
	var hosts []string
	if launcherAsNode {
		hosts = append(hosts, b.PodAddress(b.TrainerJob().Name, 0, 0))
	}
	for i := range int(nodePods) {
		hosts = append(hosts, b.PodAddress(NodeJob, 0, i))
	}
	var s strings.Builder
	for _, host := range hosts {
		if impl == trainer.MPIImplementationOpenMPI {
			fmt.Fprintf(&s, "%s slots=%d\n", host, slots)
		} else {
			fmt.Fprintf(&s, "%s:%d\n", host, slots)
		}
	}
	return s.String()
}

// addHostfile creates the hostfile as a ConfigMap, mounts it in the launcher's trainer container
// and points mpirun at it with env. Only the launcher runs mpirun, so only it gets the hostfile.
func addHostfile(b *framework.Draft, text, env string) {
	tj := b.TrainJob
	name := tj.Name + HostfileConfigMapSuffix
	b.Create = append(b.Create, &corev1.ConfigMap{
		ObjectMeta: b.ChildMeta(name),
		Data:       map[string]string{HostfileKey: text},
	})

	pod := &b.TrainerJob().Template.Spec.Template.Spec
	pod.Volumes = upsert.ByKey(pod.Volumes, upsert.VolumeName, corev1.Volume{
		Name: HostfileVolume,
		VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: name},
		}},
	})
	c := b.TrainerContainer()
	c.VolumeMounts = upsert.ByKey(c.VolumeMounts, upsert.MountPath, corev1.VolumeMount{Name: HostfileVolume, MountPath: HostfileDir})
	b.SetEnv(corev1.EnvVar{Name: env, Value: HostfilePath})
}

// addOpenMPIDefaults sets OpenMPI's launcher defaults that make the hostfile work.
func addOpenMPIDefaults(b *framework.Draft, slots int32) {
	b.SetDefaultEnv(
		corev1.EnvVar{Name: OpenMPIKeepFQDNEnv, Value: "true"},
		corev1.EnvVar{Name: OpenMPIDefaultSlotsEnv, Value: strconv.Itoa(int(slots))},
		corev1.EnvVar{Name: OpenMPIRSHArgsEnv, Value: OpenMPIRSHArgs},
	)
}
