package testenv

import (
	"context"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// issueServingCert replaces envtest's webhook serving certificate with one signed by a CA of its
// own, as cert-manager or the operator's rotation issue them: the folder gets tls.crt (the
// certificate, then the CA), tls.key and ca.crt (the CA alone), and the webhook configurations
// trust the CA. envtest's own certificate is signed by a CA it keeps to itself, and it hands out
// the serving certificate as the CA: Go's TLS accepts that as a root, OpenSSL (Python's trainers)
// does not.
func issueServingCert(ctx context.Context, c client.Client, hooks *envtest.WebhookInstallOptions) error {
	var ips []net.IP
	var names []string
	for _, name := range []string{"localhost", hooks.LocalServingHostExternalName} {
		if ip := net.ParseIP(name); ip != nil {
			ips = append(ips, ip)
		} else if name != "" {
			names = append(names, name)
		}
	}
	chain, key, err := certutil.GenerateSelfSignedCertKey(hooks.LocalServingHost, ips, names)
	if err != nil {
		return fmt.Errorf("issuing the webhook serving certificate: %w", err)
	}
	_, rest := pem.Decode(chain) // The serving certificate; rest is its CA.
	ca := rest
	files := map[string][]byte{"tls.crt": chain, "tls.key": key, "ca.crt": ca}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(hooks.LocalServingCertDir, name), data, 0o600); err != nil {
			return err
		}
	}
	hooks.LocalServingCAData = ca

	// Each webhook of the configurations envtest installed trusts the CA.
	return editWebhooks(ctx, c, hooks, func(string) bool { return true }, func(w map[string]any) error {
		return unstructured.SetNestedField(w, base64.StdEncoding.EncodeToString(ca), "clientConfig", "caBundle")
	})
}

// editWebhooks changes each webhook of the configurations envtest installed whose name keep
// accepts, with edit, and writes them.
func editWebhooks(ctx context.Context, c client.Client, hooks *envtest.WebhookInstallOptions, keep func(name string) bool, edit func(webhook map[string]any) error) error {
	configs := map[string][]string{}
	for _, cfg := range hooks.MutatingWebhooks {
		configs["MutatingWebhookConfiguration"] = append(configs["MutatingWebhookConfiguration"], cfg.Name)
	}
	for _, cfg := range hooks.ValidatingWebhooks {
		configs["ValidatingWebhookConfiguration"] = append(configs["ValidatingWebhookConfiguration"], cfg.Name)
	}
	for kind, names := range configs {
		for _, name := range names {
			if !keep(name) {
				continue
			}
			live := &unstructured.Unstructured{}
			live.SetGroupVersionKind(admissionregistrationv1.SchemeGroupVersion.WithKind(kind))
			if err := c.Get(ctx, client.ObjectKey{Name: name}, live); err != nil {
				return err
			}
			webhooks, _, _ := unstructured.NestedSlice(live.Object, "webhooks")
			for _, w := range webhooks {
				if err := edit(w.(map[string]any)); err != nil {
					return err
				}
			}
			if err := unstructured.SetNestedSlice(live.Object, webhooks, "webhooks"); err != nil {
				return err
			}
			if err := c.Update(ctx, live); err != nil {
				return err
			}
		}
	}
	return nil
}
