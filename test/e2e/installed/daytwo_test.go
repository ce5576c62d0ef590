package installed

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

// Day two: what a running install must come through without its users noticing (docs/install.md,
// "Upgrades"): an upgrade in place, a certificate's rotation, its leader's death.

// untouched is what must stay as it is of a running TrainJob while the operator is upgraded, fails
// over or rotates its certificate: the TrainJob, not written; its JobSet, the same object with the
// same spec and nothing of the operator's written again; and its pods, the same ones, none of
// their containers restarted.
type untouched struct {
	TrainJob   string // its resourceVersion
	JobSet     types.UID
	Generation int64
	// Operator is what the operator's field managers wrote of the JobSet, and when.
	Operator []metav1.ManagedFieldsEntry
	// Pods are the restarts of each pod's containers, by the pod's UID.
	Pods map[types.UID]int32
}

func untouchedOf(t require.TestingT, tj *trainer.TrainJob) untouched {
	ctx := context.Background()
	got := &trainer.TrainJob{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), got))
	js := &jobsetv1alpha2.JobSet{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), js))
	u := untouched{TrainJob: got.ResourceVersion, JobSet: js.UID, Generation: js.Generation, Pods: map[types.UID]int32{}}
	for _, f := range js.ManagedFields {
		if strings.HasPrefix(f.Manager, "trainer.kubeflow.org/") {
			u.Operator = append(u.Operator, f)
		}
	}
	for _, p := range pods(t, tj) {
		for _, c := range p.Status.ContainerStatuses {
			u.Pods[p.UID] += c.RestartCount
		}
	}
	return u
}

// startLongTrainJobs starts TrainJobs in ns that run until they are deleted, from a runtime of the
// namespace's own (the install's runtimes may not be there yet): one of two nodes on KWOK's fake
// nodes, one whose container sleeps on the real node. It returns them once every pod runs.
func startLongTrainJobs(t *testing.T, ns string) []*trainer.TrainJob {
	t.Helper()
	ctx := context.Background()
	rt := &trainer.TrainingRuntime{}
	rt.Name, rt.Namespace = "long", ns
	rt.Spec = utiltesting.MakeRuntimeSpec().Torch(&trainer.TorchMLPolicySource{}).Obj()
	require.NoError(t, k8sClient.Create(ctx, rt))
	fake := utiltesting.MakeTrainJob("long-on-kwok", ns).RuntimeRef(trainer.TrainingRuntimeKind, rt.Name).NumNodes(2).Obj()
	fake.Spec.Annotations = map[string]string{testenv.RunForAnnotation: "1h"}
	real := testenv.RealNodeTrainJob(utiltesting.MakeTrainJob("long-on-the-real-node", ns).RuntimeRef(trainer.TrainingRuntimeKind, rt.Name), 1)
	real.Spec.Trainer.Command = []string{"sleep", "3600"}
	tjs := []*trainer.TrainJob{fake, real}
	for _, tj := range tjs {
		require.NoError(t, k8sClient.Create(ctx, tj))
		explainOnFailure(t, tj)
	}
	for _, tj := range tjs {
		waitForTrainJob(t, tj, func(c *assert.CollectT, got *trainer.TrainJob) {
			assert.Equal(c, fmt.Sprintf("%d/%d", got.Status.Nodes, got.Status.Nodes), got.Status.Ready)
		})
		// Settled: nothing is written of it for a second.
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			was := untouchedOf(c, tj)
			time.Sleep(time.Second)
			assert.Equal(c, was, untouchedOf(c, tj))
		}, polling.Timeout, polling.Interval)
	}
	return tjs
}

// admissions keeps asking the API server to admit a TrainJob, every 100 ms, as a dry run (which
// calls every webhook the install registers for TrainJobs, and stores nothing), until the function
// it returns is called, or the test ends; that function returns how many it asked and the
// refusals, each with its time.
func admissions(t *testing.T, ns, runtime string) (stop func() (int, []string)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg       sync.WaitGroup
		asked    int
		refusals []string
	)
	halt := sync.OnceFunc(func() { cancel(); wg.Wait() })
	t.Cleanup(halt)
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			tj := utiltesting.MakeTrainJob(fmt.Sprintf("admitted-%d", asked), ns).RuntimeRef(trainer.TrainingRuntimeKind, runtime).Obj()
			asked++
			if err := k8sClient.Create(ctx, tj, client.DryRunAll); err != nil && ctx.Err() == nil {
				refusals = append(refusals, fmt.Sprintf("%s: %v", time.Now().Format(time.TimeOnly+".000"), err))
			}
		}
	})
	return func() (int, []string) {
		halt()
		return asked, refusals
	}
}

// upgradeInPlace upgrades the install to this tree's release, as a platform engineer does on day
// two, with TrainJobs running, and checks that nobody notices: every admission asked from before
// the upgrade until after the last old pod is gone is answered, no running TrainJob's JobSet is
// made or written again, none of its pods is replaced or restarted, and the new leader leads. It
// returns the TrainJobs, still running.
func upgradeInPlace(t *testing.T, in *testenv.Installed, ns string) []*trainer.TrainJob {
	t.Helper()
	ctx := context.Background()
	running := startLongTrainJobs(t, ns)
	before := map[string]untouched{}
	for _, tj := range running {
		before[tj.Name] = untouchedOf(t, tj)
	}
	old := map[types.UID]bool{}
	for _, p := range managerPods(t, in.Namespace) {
		old[p.UID] = true
	}
	stop := admissions(t, ns, "long")
	started := time.Now()
	require.NoError(t, in.Upgrade(ctx, thisRelease))
	leader := waitForOperator(t, in, thisRelease)
	// The Deployment counts a pod that terminates as gone; the Service may still send it calls
	// until it is.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		list := &corev1.PodList{}
		require.NoError(c, k8sClient.List(ctx, list, client.InNamespace(in.Namespace), client.MatchingLabels{"control-plane": "controller-manager"}))
		for _, p := range list.Items {
			assert.False(c, old[p.UID], "pod %s of the old release is still there", p.Name)
		}
	}, polling.Timeout, polling.Interval)
	rolled := time.Since(started)
	// The new leader has the time to rebuild or write what it would.
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		for _, tj := range running {
			require.Equal(t, before[tj.Name], untouchedOf(t, tj), "TrainJob %s after the upgrade", tj.Name)
		}
	}
	asked, refusals := stop()
	t.Logf("upgraded from %s in %s, %s leads; %d admissions asked during the roll", previousCommit, rolled.Round(100*time.Millisecond), leader, asked)
	assert.Greater(t, asked, int(rolled/(200*time.Millisecond)), "too few admissions asked to tell")
	assert.Empty(t, refusals, "admissions refused during the upgrade")
	return running
}

// certificateRotates has the install renew its webhook certificate, as its rotation does 90 days
// before the certificate expires, while TrainJobs are admitted: the test writes a certificate of
// the install's CA that expires in 30 days into the Secret, the manager replaces it with one of a
// year from the same CA, each replica serves that one once the kubelet updates the Secret it
// mounts, and no admission is refused on the way: the webhook configurations' CA never changes.
func certificateRotates(t *testing.T, in *testenv.Installed, ns, runtime string) {
	t.Helper()
	ctx := context.Background()
	key := client.ObjectKey{Namespace: in.Namespace, Name: "trainjob-webhook-server-cert"}
	secret := &corev1.Secret{}
	require.NoError(t, k8sClient.Get(ctx, key, secret))
	caBundles := func() [][]byte {
		validating := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		require.NoError(t, k8sClient.Get(ctx, client.ObjectKey{Name: "trainjob-validating-webhook-configuration"}, validating))
		mutating := &admissionregistrationv1.MutatingWebhookConfiguration{}
		require.NoError(t, k8sClient.Get(ctx, client.ObjectKey{Name: "trainjob-mutating-webhook-configuration"}, mutating))
		var bundles [][]byte
		for _, w := range validating.Webhooks {
			bundles = append(bundles, w.ClientConfig.CABundle)
		}
		for _, w := range mutating.Webhooks {
			bundles = append(bundles, w.ClientConfig.CABundle)
		}
		return bundles
	}
	bundles := caBundles()
	require.NotEmpty(t, bundles)

	stop := admissions(t, ns, runtime)
	expiring, expiringKey := certificateOf(t, secret.Data["ca.crt"], secret.Data["ca.key"],
		fmt.Sprintf("%s.%s.svc", webhookServiceName, in.Namespace), 30*24*time.Hour)
	secret.Data["tls.crt"], secret.Data["tls.key"] = expiring, expiringKey
	require.NoError(t, k8sClient.Update(ctx, secret))
	var renewed []byte
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := &corev1.Secret{}
		require.NoError(c, k8sClient.Get(ctx, key, got))
		notAfter := parseCertificate(c, got.Data["tls.crt"]).NotAfter
		assert.Greater(c, time.Until(notAfter), 300*24*time.Hour, "the certificate was not renewed")
		renewed = got.Data["tls.crt"]
	}, polling.Timeout, polling.Interval)
	// The kubelet updates the mounted Secret within its sync period (a minute) and its cache's.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, p := range managerPods(t, in.Namespace) {
			assert.Equal(c, parseCertificate(c, renewed).Raw, servedCertificate(c, p.Status.PodIP), "pod %s serves another certificate", p.Name)
		}
	}, startPolling.Timeout, time.Second)
	asked, refusals := stop()
	t.Logf("%d admissions asked while the certificate was renewed", asked)
	assert.Empty(t, refusals, "admissions refused while the certificate was renewed")
	assert.Equal(t, bundles, caBundles(), "the webhooks' CA changed")
}

// certificateOf makes a serving certificate for dnsName signed by the CA, valid for validity, and
// returns it and its key, PEM-encoded as cert-controller writes them.
func certificateOf(t *testing.T, caPEM, caKeyPEM []byte, dnsName string, validity time.Duration) ([]byte, []byte) {
	t.Helper()
	ca := parseCertificate(t, caPEM)
	block, _ := pem.Decode(caKeyPEM)
	require.NotNil(t, block, "the CA's key is no PEM")
	caKey, err := x509.ParsePKCS1PrivateKey(block.Bytes)
	require.NoError(t, err)
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: dnsName},
		DNSNames:     []string{dnsName},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
}

func parseCertificate(t require.TestingT, data []byte) *x509.Certificate {
	block, _ := pem.Decode(data)
	require.NotNil(t, block, "no PEM certificate")
	cert, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	return cert
}

// servedCertificate is the certificate a manager pod's webhook server presents, in DER.
func servedCertificate(t require.TestingT, podIP string) []byte {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", net.JoinHostPort(podIP, "9443"),
		&tls.Config{InsecureSkipVerify: true}) //nolint:gosec // Only the certificate is read.
	require.NoError(t, err)
	defer conn.Close()
	certs := conn.ConnectionState().PeerCertificates
	require.NotEmpty(t, certs)
	return certs[0].Raw
}
