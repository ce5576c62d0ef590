package mpi

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestSSHAuthSecret checks that the Secret carries a usable key pair that every pod trusts, and
// that it is owned by the TrainJob so that it goes away with it.
func TestSSHAuthSecret(t *testing.T) {
	secret := func() *corev1.Secret {
		children, err := buildMPI(trainJob().Obj(), mpiRuntime(2, openMPI(1)).Obj())
		require.NoError(t, err)
		require.Len(t, children.Create, 1)
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
