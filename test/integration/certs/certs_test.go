// Package certs runs the manager's own webhook certificate rotation (cert-controller) against a
// real kube-apiserver with the installed webhook configurations, playing kubelet's part: copying
// the certificate Secret into the pod's mount.
package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
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
	defer cluster.Stop()
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

	certDir := t.TempDir()
	port := freePort(t)
	mgr, err := ctrl.NewManager(cluster.Env.Config, ctrl.Options{
		Scheme:        testenv.Scheme,
		Metrics:       metricsserver.Options{BindAddress: "0"},
		WebhookServer: webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: port, CertDir: certDir}),
	})
	require.NoError(t, err)
	opts := certs.Options{
		Namespace:                      "trainjob-system",
		SecretName:                     "trainjob-webhook-server-cert",
		ServiceName:                    "trainjob-webhook-service",
		ValidatingWebhookConfiguration: "trainjob-validating-webhook-configuration",
		MutatingWebhookConfiguration:   "trainjob-mutating-webhook-configuration",
		CertDir:                        certDir,
	}
	certsReady, err := certs.Rotate(mgr, opts)
	require.NoError(t, err)
	ready := operatorwebhook.SetupWhenReady(mgr, controller.Frameworks(), certsReady)
	mgrCtx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- mgr.Start(mgrCtx) }()
	defer func() { cancel(); <-done }()

	require.Error(t, ready(nil), "ready before there is a certificate")

	// Kubelet's part: the Secret's keys appear as files in the mount once it has them.
	secret := &corev1.Secret{}
	require.Eventually(t, func() bool {
		return c.Get(ctx, client.ObjectKey{Namespace: opts.Namespace, Name: opts.SecretName}, secret) == nil &&
			len(secret.Data["tls.crt"]) > 0
	}, 30*time.Second, 100*time.Millisecond, "the rotator did not fill the Secret")
	for name, data := range secret.Data {
		require.NoError(t, os.WriteFile(filepath.Join(certDir, name), data, 0o600))
	}

	require.Eventually(t, func() bool { return ready(nil) == nil }, 60*time.Second, 200*time.Millisecond,
		"readyz did not pass once the certificate was mounted")

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
