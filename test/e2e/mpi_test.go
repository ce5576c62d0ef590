package e2e

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework/mpi"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

// readySince is when a pod last became Ready, or the zero time.
func readySince(p *corev1.Pod) (ready bool, since int64) {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true, c.LastTransitionTime.Unix()
		}
	}
	return false, 0
}

// mountsVolume reports whether a pod mounts the volume at path in its first container.
func mountsVolume(p *corev1.Pod, volume, path string) bool {
	for _, m := range p.Spec.Containers[0].VolumeMounts {
		if m.Name == volume && m.MountPath == path {
			return true
		}
	}
	return false
}

// TestMPIRunsItsLauncherAfterTheNodes runs the shipped MPI runtime, with pods that take two
// seconds to start: its launcher is created only once every node pod is Ready, as the runtime's
// dependsOn says, and the SSH key Secret and the hostfile exist and are mounted where mpirun and
// sshd look for them.
func TestMPIRunsItsLauncherAfterTheNodes(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	tj := utiltesting.MakeTrainJob("mpi", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, "mpi-distributed").NumNodes(3).Obj()
	tj.Spec.Annotations = map[string]string{testenv.StartAfterAnnotation: "2s"}
	require.NoError(t, k8sClient.Create(ctx, tj))

	var launcher *corev1.Pod
	var nodes []corev1.Pod
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		launcher, nodes = nil, nil
		for _, p := range pods(c, tj) {
			if p.Labels[jobsetv1alpha2.ReplicatedJobNameKey] == "launcher" {
				launcher = &p
			} else {
				nodes = append(nodes, p)
			}
		}
		require.NotNil(c, launcher, "no launcher pod yet")
	}, timeout, interval)
	require.Len(t, nodes, 3)
	for _, n := range nodes {
		ready, since := readySince(&n)
		require.True(t, ready, "the launcher started before node pod %s was Ready", n.Name)
		assert.LessOrEqual(t, since, launcher.CreationTimestamp.Unix(), "the launcher started before node pod %s was Ready", n.Name)
	}

	secret := &corev1.Secret{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: tj.Name + mpi.SSHAuthSecretSuffix}, secret))
	assert.Equal(t, corev1.SecretTypeSSHAuth, secret.Type)
	hostfile := &corev1.ConfigMap{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: tj.Name + mpi.HostfileConfigMapSuffix}, hostfile))
	assert.Equal(t, "mpi-node-0-0.mpi slots=1\nmpi-node-0-1.mpi slots=1\nmpi-node-0-2.mpi slots=1\n", hostfile.Data[mpi.HostfileKey])

	assert.True(t, mountsVolume(launcher, mpi.HostfileVolume, mpi.HostfileDir), "the launcher does not mount the hostfile")
	assert.True(t, mountsVolume(launcher, mpi.SSHAuthVolume, "/home/mpiuser/.ssh"), "the launcher does not mount the SSH keys")
	for _, n := range nodes {
		assert.True(t, mountsVolume(&n, mpi.SSHAuthVolume, "/home/mpiuser/.ssh"), "node pod %s does not mount the SSH keys", n.Name)
	}
	waitForComplete(t, tj)
}
