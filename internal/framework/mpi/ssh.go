package mpi

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"

	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/trainjob/operator/internal/framework"
	"github.com/trainjob/operator/internal/upsert"
)

const (
	// SSHAuthSecretSuffix names a TrainJob's SSH key Secret: <tj>-mpi-ssh-auth.
	SSHAuthSecretSuffix = "-mpi-ssh-auth"
	// SSHAuthVolume is the pod volume of the SSH key Secret, in the launcher and node pods.
	SSHAuthVolume = "mpi-ssh-auth"

	// SSHPublicKeyKey is the Secret's key of the public key; corev1.SSHAuthPrivateKey
	// (ssh-privatekey) holds the private key.
	SSHPublicKeyKey = "ssh-publickey"
	// AuthorizedKeysKey is the Secret's key of sshd's authorized_keys: the public key, so that
	// every pod accepts the launcher, and the nodes each other.
	AuthorizedKeysKey = "authorized_keys"

	// Files in sshAuthMountPath, named as mpi-operator names them and as the MPI images' sshd
	// configuration expects (HostKey <path>/id_rsa, AuthorizedKeysFile <path>/authorized_keys):
	// one key pair is every pod's host key and every pod's client key. ssh and sshd read the
	// key's type from the file, not its name, so an ed25519 key may be id_rsa.
	PrivateKeyFile     = "id_rsa"
	PublicKeyFile      = "id_rsa.pub"
	AuthorizedKeysFile = "authorized_keys"
)

// File modes of the mounted keys. Kubelet writes them owned by root. ssh refuses a private key
// of its own user that others can read, so for root the key is 0600; a non-root user could not
// read a root-owned 0600 key at all, and ssh accepts a key that belongs to another user however
// readable it is, so elsewhere it is 0644, as mpi-operator does. sshd (StrictModes) refuses an
// authorized_keys that others can write: it is 0644 everywhere.
const (
	rootPrivateKeyMode int32 = 0o600
	publicKeyMode      int32 = 0o644
)

// privateKeyMode is the mode of the private key for the user that reads it from mountPath.
func privateKeyMode(mountPath string) int32 {
	if mountPath == DefaultSSHAuthMountPath {
		return rootPrivateKeyMode
	}
	return publicKeyMode
}

// addSSHAuth generates the TrainJob's SSH key pair into a Secret, created once with the JobSet,
// and mounts it at mountPath in the launcher's trainer container and the node container.
func addSSHAuth(b *framework.Draft, nodePod *corev1.PodSpec, node *corev1.Container, mountPath string) error {
	secret, err := sshAuthSecret(b)
	if err != nil {
		return err
	}
	b.Create = append(b.Create, secret)

	volume := sshAuthVolume(secret.Name, privateKeyMode(mountPath))
	mount := corev1.VolumeMount{Name: SSHAuthVolume, MountPath: mountPath}
	launcherPod := &b.TrainerJob().Template.Spec.Template.Spec
	for _, pod := range []*corev1.PodSpec{launcherPod, nodePod} {
		pod.Volumes = upsert.ByKey(pod.Volumes, upsert.VolumeName, volume)
	}
	for _, c := range []*corev1.Container{b.TrainerContainer(), node} {
		c.VolumeMounts = upsert.ByKey(c.VolumeMounts, upsert.MountPath, mount)
	}
	return nil
}

// sshAuthSecret is a new Secret with a freshly generated ed25519 key pair. It is immutable: the
// pods of a TrainJob must keep trusting each other for as long as it runs.
func sshAuthSecret(b *framework.Draft) (*corev1.Secret, error) {
	private, public, err := generateKeyPair()
	if err != nil {
		return nil, fmt.Errorf("generating the SSH keys of TrainJob %s/%s: %w", b.TrainJob.Namespace, b.TrainJob.Name, err)
	}
	return &corev1.Secret{
		ObjectMeta: b.ChildMeta(b.TrainJob.Name + SSHAuthSecretSuffix),
		Type:       corev1.SecretTypeSSHAuth,
		Immutable:  ptr.To(true),
		Data: map[string][]byte{
			corev1.SSHAuthPrivateKey: private,
			SSHPublicKeyKey:          public,
			AuthorizedKeysKey:        public,
		},
	}, nil
}

// generateKeyPair returns a new ed25519 private key as an OpenSSH PEM block and its public key
// in authorized_keys format.
func generateKeyPair() (private, public []byte, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		return nil, nil, err
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(block), ssh.MarshalAuthorizedKey(sshPub), nil
}

// sshAuthVolume projects the Secret's keys to the file names and modes ssh and sshd expect.
func sshAuthVolume(secret string, keyMode int32) corev1.Volume {
	return corev1.Volume{Name: SSHAuthVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName: secret,
		Items: []corev1.KeyToPath{
			{Key: corev1.SSHAuthPrivateKey, Path: PrivateKeyFile, Mode: ptr.To(keyMode)},
			{Key: SSHPublicKeyKey, Path: PublicKeyFile, Mode: ptr.To(publicKeyMode)},
			{Key: AuthorizedKeysKey, Path: AuthorizedKeysFile, Mode: ptr.To(publicKeyMode)},
		},
		DefaultMode: ptr.To(keyMode),
	}}}
}
