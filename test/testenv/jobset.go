package testenv

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// jobSetWebhooks returns JobSet's own webhook configurations, as its release installs them
// (kustomize of its config/components/webhook, from the module cache), renamed so that they do
// not collide with the operator's, which controller-gen names the same.
func jobSetWebhooks() ([]*admissionv1.MutatingWebhookConfiguration, []*admissionv1.ValidatingWebhookConfiguration, error) {
	dir, err := moduleDir(jobSetCRD.module)
	if err != nil {
		return nil, nil, err
	}
	objs, err := Kustomize(filepath.Join(dir, "config", "components", "webhook"))
	if err != nil {
		return nil, nil, err
	}
	var (
		mutating   []*admissionv1.MutatingWebhookConfiguration
		validating []*admissionv1.ValidatingWebhookConfiguration
	)
	for _, obj := range objs {
		var into interface{ SetName(string) }
		switch obj.GetKind() {
		case "MutatingWebhookConfiguration":
			m := &admissionv1.MutatingWebhookConfiguration{}
			mutating, into = append(mutating, m), m
		case "ValidatingWebhookConfiguration":
			v := &admissionv1.ValidatingWebhookConfiguration{}
			validating, into = append(validating, v), v
		default:
			continue // The Service: webhooks are reached by URL here.
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, into); err != nil {
			return nil, nil, fmt.Errorf("reading JobSet's %s: %w", obj.GetKind(), err)
		}
		into.SetName("jobset-" + obj.GetName())
	}
	if len(mutating) == 0 || len(validating) == 0 {
		return nil, nil, fmt.Errorf("no webhook configurations in JobSet's %s", dir)
	}
	return mutating, validating, nil
}

// jobSetConfig is the configuration file of the JobSet controller: no leader election, no
// certificate management of its own (the webhook certificate is envtest's, in certDir), the
// webhook server on loopback, and a client rate that keeps up with thousands of JobSets.
func jobSetConfig(hooks envtest.WebhookInstallOptions) string {
	return `apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
clientConnection:
  qps: 500
  burst: 500
webhook:
  host: ` + hooks.LocalServingHost + `
  port: ` + strconv.Itoa(hooks.LocalServingPort) + `
  certDir: ` + hooks.LocalServingCertDir + `
`
}

// startJobSet installs JobSet's webhook configurations, pointed at a server on loopback with a
// certificate envtest makes, and starts the JobSet controller serving them there.
func (c *Cluster) startJobSet(kubeconfig string) error {
	mutating, validating, err := jobSetWebhooks()
	if err != nil {
		return err
	}
	hooks := envtest.WebhookInstallOptions{LocalServingHost: "127.0.0.1"}
	for _, m := range mutating {
		hooks.MutatingWebhooks = append(hooks.MutatingWebhooks, m)
	}
	for _, v := range validating {
		hooks.ValidatingWebhooks = append(hooks.ValidatingWebhooks, v)
	}
	if err := hooks.PrepWithoutInstalling(); err != nil {
		return fmt.Errorf("preparing JobSet's webhooks: %w", err)
	}
	c.cleanup = append(c.cleanup, func() { _ = hooks.Cleanup() })
	config := filepath.Join(c.Dir, "jobset.yaml")
	if err := os.WriteFile(config, []byte(jobSetConfig(hooks)), 0o600); err != nil {
		return err
	}
	if err := c.run("jobset-controller", []string{"KUBECONFIG=" + kubeconfig},
		"--config="+config, "--kubeconfig="+kubeconfig, "--metrics-bind-address=0", "--health-probe-bind-address=0"); err != nil {
		return err
	}
	if err := hooks.Install(c.Env.Config); err != nil {
		return fmt.Errorf("installing JobSet's webhooks: %w", err)
	}
	return c.waitFor("JobSet's webhook server", func() bool {
		return ServesTLS(net.JoinHostPort(hooks.LocalServingHost, strconv.Itoa(hooks.LocalServingPort)))
	})
}
