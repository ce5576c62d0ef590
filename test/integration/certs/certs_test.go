// Package certs runs the manager's own webhook certificate rotation (cert-controller) against a
// real kube-apiserver with the installed webhook configurations, playing kubelet's part: copying
// the certificate Secret into the pod's mount.
package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/trainjob/operator/internal/certs"
	"github.com/trainjob/operator/internal/controller"
	operatorwebhook "github.com/trainjob/operator/internal/webhook"
	"github.com/trainjob/operator/test/testenv"
)

func TestRotatedCertificate(t *testing.T) {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	ctx := context.Background()
	cluster, err := testenv.Start()
	require.NoError(t, err)
	t.Cleanup(cluster.Stop) // After the managers' cleanups, registered later.
	c := cluster.Client

	// The install's namespace, empty certificate Secret and webhook configurations.
	installed, err := testenv.Kustomize(filepath.Join("..", "..", "..", "config", "default"))
	require.NoError(t, err)
	for _, obj := range installed {
		switch obj.GetKind() {
		case "Namespace", "Secret", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration":
			require.NoError(t, testenv.Apply(ctx, c, "certs-test", obj))
		}
	}

	opts := certs.Options{
		Namespace:                      "trainjob-system",
		SecretName:                     "trainjob-webhook-server-cert",
		ServiceName:                    "trainjob-webhook-service",
		ValidatingWebhookConfiguration: "trainjob-validating-webhook-configuration",
		MutatingWebhookConfiguration:   "trainjob-mutating-webhook-configuration",
	}
	// The webhook server listens on a port found free a moment before: another test process may
	// take it meanwhile, and the manager then stops. It is started again on another.
	var port int
	var secret *corev1.Secret
	for attempt := 1; ; attempt++ {
		var stopped error
		port, secret, stopped = runManager(t, cluster, opts)
		if stopped == nil {
			break
		}
		require.ErrorContains(t, stopped, "address already in use", "the manager stopped")
		require.Less(t, attempt, 3, "no free port for the webhook server")
	}

	// The CA is in every webhook of both configurations...
	ca := secret.Data["ca.crt"]
	require.NotEmpty(t, ca)
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: opts.ValidatingWebhookConfiguration}, validating))
	for _, w := range validating.Webhooks {
		assert.Equal(t, ca, w.ClientConfig.CABundle, w.Name)
	}
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{}
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: opts.MutatingWebhookConfiguration}, mutating))
	for _, w := range mutating.Webhooks {
		assert.Equal(t, ca, w.ClientConfig.CABundle, w.Name)
	}

	// ...and the webhook server serves a certificate that this CA signed for the Service's name.
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(ca))
	conn, err := tls.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), &tls.Config{
		RootCAs: roots, ServerName: "trainjob-webhook-service.trainjob-system.svc",
	})
	require.NoError(t, err, "the served certificate does not verify against the injected CA")
	require.NoError(t, conn.Close())
}

// runManager starts a manager with the certificate rotation and the webhooks, plays kubelet's part
// (the Secret's keys appear as files in the mount once it has them), and waits for readyz to pass.
// It returns the webhook server's port and the Secret, or the error the manager stopped with.
func runManager(t *testing.T, cluster *testenv.Cluster, opts certs.Options) (int, *corev1.Secret, error) {
	ctx := context.Background()
	c := cluster.Client
	opts.CertDir = t.TempDir()
	port := freePort(t)
	opts.ControllerName = fmt.Sprintf("cert-rotator-%d", port) // Unique in the process, for a second try.
	// As the installed operator, with its RBAC: its Role lets it have this Secret, and its
	// ClusterRole patch these webhook configurations.
	cfg, err := cluster.OperatorConfig(ctx)
	require.NoError(t, err)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:        testenv.Scheme,
		Metrics:       metricsserver.Options{BindAddress: "0"},
		WebhookServer: webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: port, CertDir: opts.CertDir}),
	})
	require.NoError(t, err)
	certsReady, err := certs.Rotate(mgr, opts)
	require.NoError(t, err)
	ready := operatorwebhook.SetupWhenReady(mgr, controller.Frameworks(""), operatorwebhook.Options{}, certsReady)
	mgrCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mgrCtx) }()
	t.Cleanup(func() { cancel(); <-done })

	require.Error(t, ready(nil), "ready before there is a certificate")
	secret := &corev1.Secret{}
	require.Eventually(t, func() bool {
		return c.Get(ctx, client.ObjectKey{Namespace: opts.Namespace, Name: opts.SecretName}, secret) == nil &&
			len(secret.Data["tls.crt"]) > 0
	}, 30*time.Second, 100*time.Millisecond, "the rotator did not fill the Secret")
	for name, data := range secret.Data {
		require.NoError(t, os.WriteFile(filepath.Join(opts.CertDir, name), data, 0o600))
	}

	var stopped error
	require.Eventually(t, func() bool {
		select {
		case stopped = <-done:
			done <- stopped // For the cleanup.
			return true
		default:
			return ready(nil) == nil
		}
	}, 60*time.Second, 200*time.Millisecond, "readyz did not pass once the certificate was mounted")
	return port, secret, stopped
}

func freePort(t *testing.T) int {
	t.Helper()
	addr, err := testenv.FreeAddr()
	require.NoError(t, err)
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	n, err := strconv.Atoi(port)
	require.NoError(t, err)
	return n
}
