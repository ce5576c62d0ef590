package mpi

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	utiltesting "github.com/trainjob/operator/internal/testing"
)

// TestSSHAuthSecret checks that the Secret carries a usable key pair that every pod trusts, and
// that it is owned by the TrainJob so that it goes away with it.
func TestSSHAuthSecret(t *testing.T) {
	secret := func() *corev1.Secret {
		children, err := buildMPI(trainJob().Obj(), mpiRuntime(2, openMPI(1)).Obj())
		require.NoError(t, err)
		require.Len(t, children.Create, 2)
		return children.Create[0].(*corev1.Secret)
	}
	got := secret()

	want := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      "mnist-mpi-ssh-auth",
			Namespace: "ns",
			Labels:    map[string]string{"trainer.kubeflow.org/trainjob-name": "mnist"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "trainer.kubeflow.org/v1alpha1", Kind: "TrainJob", Name: "mnist", UID: "mnist-uid",
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Type:      corev1.SecretTypeSSHAuth,
		Immutable: ptr.To(true),
	}
	withoutData := got.DeepCopy()
	withoutData.Data = nil
	if diff := cmp.Diff(want, withoutData); diff != "" {
		t.Errorf("Secret (-want +got):\n%s", diff)
	}
	require.ElementsMatch(t, []string{"ssh-privatekey", "ssh-publickey", "authorized_keys"}, keys(got.Data))

	publicKey := parseKeyPair(t, got)
	if diff := cmp.Diff(string(got.Data["ssh-publickey"]), string(got.Data["authorized_keys"])); diff != "" {
		t.Errorf("authorized_keys is not the public key (-public +authorized_keys):\n%s", diff)
	}
	require.Equal(t, ssh.KeyAlgoED25519, publicKey.Type())

	// Every build generates keys; the controller creates the Secret of the first one only.
	other := secret()
	parseKeyPair(t, other)
	require.NotEqual(t, got.Data["ssh-privatekey"], other.Data["ssh-privatekey"], "two builds generated the same key")
}

// parseKeyPair parses the Secret's private key as ssh would, checks that ssh-publickey is its
// public key, and returns it.
func parseKeyPair(t *testing.T, s *corev1.Secret) ssh.PublicKey {
	t.Helper()
	signer, err := ssh.ParsePrivateKey(s.Data["ssh-privatekey"])
	require.NoError(t, err, "ssh-privatekey")
	public, _, _, rest, err := ssh.ParseAuthorizedKey(s.Data["ssh-publickey"])
	require.NoError(t, err, "ssh-publickey")
	require.Empty(t, rest)
	require.Equal(t, signer.PublicKey().Marshal(), public.Marshal(), "ssh-publickey is not the private key's public key")
	return public
}

func keys(m map[string][]byte) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// TestMountedKeysServeSSHD reads the key files as the pods see them, from the built JobSet's
// mounts and the Secret, and checks what the MPI images' sshd configuration needs from them:
// HostKey <mount>/id_rsa is a private key, and AuthorizedKeysFile <mount>/authorized_keys
// accepts that same key, which every pod's ssh offers from <mount>/id_rsa.
func TestMountedKeysServeSSHD(t *testing.T) {
	const mount = "/home/mpiuser/.ssh"
	policy := openMPI(1)
	policy.SSHAuthMountPath = ptr.To(mount)
	children, err := buildMPI(trainJob().Obj(), mpiRuntime(2, policy).Obj())
	require.NoError(t, err)
	secret := children.Create[0].(*corev1.Secret)
	js := utiltesting.FromApplyConfiguration[jobsetv1alpha2.JobSet](t, children.JobSet)

	for _, job := range js.Spec.ReplicatedJobs {
		pod := job.Template.Spec.Template.Spec
		files := mountedFiles(t, pod, mount, secret)
		require.ElementsMatch(t, []string{"id_rsa", "id_rsa.pub", "authorized_keys"}, keys(files), "files in %s of job %s", mount, job.Name)

		hostKey, err := ssh.ParsePrivateKey(files["id_rsa"])
		require.NoError(t, err, "job %s: %s/id_rsa is not an OpenSSH private key", job.Name, mount)
		authorized, _, _, _, err := ssh.ParseAuthorizedKey(files["authorized_keys"])
		require.NoError(t, err, "job %s: authorized_keys", job.Name)
		require.Equal(t, hostKey.PublicKey().Marshal(), authorized.Marshal(), "job %s: authorized_keys does not accept id_rsa", job.Name)
		public, _, _, _, err := ssh.ParseAuthorizedKey(files["id_rsa.pub"])
		require.NoError(t, err, "job %s: id_rsa.pub", job.Name)
		require.Equal(t, hostKey.PublicKey().Marshal(), public.Marshal(), "job %s: id_rsa.pub is not id_rsa's public key", job.Name)
	}
}

// mountedFiles returns the files a pod's container "node" sees under dir, from the Secret its
// volume projects there.
func mountedFiles(t *testing.T, pod corev1.PodSpec, dir string, secret *corev1.Secret) map[string][]byte {
	t.Helper()
	var volume string
	for _, c := range pod.Containers {
		for _, m := range c.VolumeMounts {
			if c.Name == "node" && m.MountPath == dir {
				volume = m.Name
			}
		}
	}
	require.NotEmpty(t, volume, "nothing is mounted at %s", dir)
	for _, v := range pod.Volumes {
		if v.Name != volume {
			continue
		}
		require.NotNil(t, v.Secret)
		require.Equal(t, secret.Name, v.Secret.SecretName)
		files := map[string][]byte{}
		for _, item := range v.Secret.Items {
			files[item.Path] = secret.Data[item.Key]
		}
		return files
	}
	t.Fatalf("no volume %q", volume)
	return nil
}
