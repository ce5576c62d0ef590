// Package progress lets a TrainJob's trainer report its progress to the operator, which writes
// it into the TrainJob's status.trainerStatus, in upstream Kubeflow Trainer's shape so that its
// SDK's reporter works unchanged:
//
//   - the build gives the trainer container the endpoint's URL, the path of the CA that signs
//     the endpoint's certificate, and the path of a service account token whose audience is this
//     TrainJob's alone (KUBEFLOW_TRAINER_SERVER_URL, _CA_CERT, _TOKEN); the CA comes from an
//     annotation of the trainer job's pods (CAAnnotation, by the downward API), the token from
//     the kubelet;
//   - the endpoint, served by the webhook server, accepts a POST of an UpdateTrainJobStatusRequest
//     only with a token the API server says is a service account's of the TrainJob's namespace,
//     issued for the TrainJob's audience, and writes the latest report of each TrainJob at most
//     once per interval, within a rate for all of them.
package progress

import (
	"bytes"
	"fmt"
	"os"
	"path"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
	"github.com/trainjob/operator/internal/upsert"
)

// The env vars the trainer container gets, upstream's names.
const (
	URLEnv    = "KUBEFLOW_TRAINER_SERVER_URL"
	CACertEnv = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
	TokenEnv  = "KUBEFLOW_TRAINER_SERVER_TOKEN"
)

// ReservedEnv are the env vars a TrainJob or runtime may not set on the trainer container.
var ReservedEnv = []string{URLEnv, CACertEnv, TokenEnv}

const (
	// Volume is the projected volume of the token and the CA, mounted at MountPath.
	Volume    = "kubeflow-trainer-token"
	MountPath = "/var/run/secrets/kubeflow/trainer"
	caFile    = "ca.crt"
	tokenFile = "token"
	// defaultServiceAccount runs a pod that names none.
	defaultServiceAccount = "default"
	// tokenSeconds is how long a token lives; the kubelet renews it before it expires.
	tokenSeconds = 3600
)

// Path is the endpoint's path for one TrainJob, upstream's.
func Path(namespace, name string) string {
	return fmt.Sprintf("/apis/trainer.kubeflow.org/v1alpha1/namespaces/%s/trainjobs/%s/status", namespace, name)
}

// Pattern is the endpoint's method and path with the namespace and name as wildcards, for
// http.ServeMux.
var Pattern = "POST " + Path("{namespace}", "{name}")

// Audience is the audience a TrainJob's token is issued for, upstream's: a token for one TrainJob
// is no good for another.
func Audience(namespace, name string) string {
	return "trainer.kubeflow.org/v1alpha1/namespaces/" + namespace + "/trainjobs/" + name + "/status"
}

// CAAnnotation is the annotation of the trainer job's pods that holds the endpoint's CA, which the
// progress volume projects into ca.crt. Upstream Trainer copies the CA into a ConfigMap of each
// TrainJob (<name>-tls-config) and projects that: one more object, and one more write, for each
// TrainJob. In the JobSet itself, wiring a TrainJob costs neither.
const CAAnnotation = "trainer.kubeflow.org/progress-ca"

// Endpoint is where the trainers report: the URL of the webhook server, and the file of the CA
// that signs its certificate. The CA is read when a TrainJob is built, and read again whenever
// the file changed: a renewed CA (cert-controller's, cert-manager's) reaches every TrainJob built
// after it.
type Endpoint struct {
	// URL is the server's base URL, e.g. https://trainjob-webhook-service.trainjob-system.svc.
	URL string
	// CAFile is the PEM file of the CA.
	CAFile string

	mu sync.Mutex
	// ca is the file's content when it had modTime and size.
	ca      []byte
	modTime time.Time
	size    int64
}

// Step returns the build step that wires a TrainJob to the endpoint with the CA as it is now, or
// an error saying why the CA cannot be read: the TrainJob is then built without progress
// reporting, and told so.
func (e *Endpoint) Step() (func(*framework.Draft) error, error) {
	ca, err := e.caPEM()
	if err != nil {
		return nil, err
	}
	return func(b *framework.Draft) error { e.inject(b, ca); return nil }, nil
}

// caPEM reads the CA, again only when the file changed since it was last read.
func (e *Endpoint) caPEM() ([]byte, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	info, err := os.Stat(e.CAFile)
	if err != nil {
		return nil, fmt.Errorf("reading the progress endpoint's CA: %w", err)
	}
	if e.ca != nil && info.ModTime().Equal(e.modTime) && info.Size() == e.size {
		return e.ca, nil
	}
	data, err := os.ReadFile(e.CAFile)
	switch {
	case err != nil:
		return nil, fmt.Errorf("reading the progress endpoint's CA: %w", err)
	case len(bytes.TrimSpace(data)) == 0:
		return nil, fmt.Errorf("reading the progress endpoint's CA: %s is empty", e.CAFile)
	}
	e.ca, e.modTime, e.size = data, info.ModTime(), info.Size()
	return data, nil
}

// inject gives the trainer container the endpoint's env vars and mounts its token and the CA, which
// the trainer job's pods hold in their CAAnnotation.
func (e *Endpoint) inject(b *framework.Draft, ca []byte) {
	tj := b.TrainJob
	template := &b.TrainerJob().Template.Spec.Template
	if template.Annotations == nil {
		template.Annotations = map[string]string{}
	}
	template.Annotations[CAAnnotation] = string(ca)
	pod := &template.Spec
	pod.Volumes = upsert.ByKey(pod.Volumes, upsert.VolumeName, volume(tj))
	if pod.ServiceAccountName == "" {
		// A token is projected only for a named service account. The API server's ServiceAccount
		// admission names the default one in most clusters; not in all (envtest's).
		pod.ServiceAccountName = defaultServiceAccount
	}
	c := b.TrainerContainer()
	c.VolumeMounts = upsert.ByKey(c.VolumeMounts, upsert.MountPath, corev1.VolumeMount{Name: Volume, MountPath: MountPath, ReadOnly: true})
	c.Env = upsert.Env(c.Env,
		corev1.EnvVar{Name: URLEnv, Value: e.URL + Path(tj.Namespace, tj.Name)},
		corev1.EnvVar{Name: CACertEnv, Value: path.Join(MountPath, caFile)},
		corev1.EnvVar{Name: TokenEnv, Value: path.Join(MountPath, tokenFile)},
	)
}

// volume projects the TrainJob's token and the CA into one folder.
func volume(tj *trainer.TrainJob) corev1.Volume {
	return corev1.Volume{Name: Volume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
				Audience: Audience(tj.Namespace, tj.Name), ExpirationSeconds: ptr.To[int64](tokenSeconds), Path: tokenFile,
			}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{
				Path: caFile, FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.annotations['" + CAAnnotation + "']"},
			}}}},
		},
	}}}
}
