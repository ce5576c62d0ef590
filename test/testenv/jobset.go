package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// jobSetWebhooks returns JobSet's own webhook configurations, as its release installs them.
func jobSetWebhooks() ([]*admissionv1.MutatingWebhookConfiguration, []*admissionv1.ValidatingWebhookConfiguration, error) {
	return moduleWebhooks(jobSetCRD, "jobset-", nil)
}

// moduleWebhooks returns the webhook configurations a controller's release installs (kustomize of
// its config/components/webhook, from the module cache of the module crd names), renamed with a
// prefix so that they do not collide with the operator's, which controller-gen names the same.
// edit, when set, is asked of each webhook, by its rules, whether to keep it and which objects it
// sees (nil: all, as installed).
func moduleWebhooks(of crd, prefix string, edit webhookEdit) ([]*admissionv1.MutatingWebhookConfiguration, []*admissionv1.ValidatingWebhookConfiguration, error) {
	dir, err := moduleDirIn(of.in, of.module)
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
			return nil, nil, fmt.Errorf("reading %s's %s: %w", of.module, obj.GetKind(), err)
		}
		into.SetName(prefix + obj.GetName())
	}
	if edit != nil {
		for _, m := range mutating {
			kept := m.Webhooks[:0]
			for _, w := range m.Webhooks {
				if edit.apply(w.Rules, &w.ObjectSelector) {
					kept = append(kept, w)
				}
			}
			m.Webhooks = kept
		}
		for _, v := range validating {
			kept := v.Webhooks[:0]
			for _, w := range v.Webhooks {
				if edit.apply(w.Rules, &w.ObjectSelector) {
					kept = append(kept, w)
				}
			}
			v.Webhooks = kept
		}
	}
	if len(mutating) == 0 || len(validating) == 0 {
		return nil, nil, fmt.Errorf("no webhook configurations in %s's %s", of.module, dir)
	}
	return mutating, validating, nil
}

// webhookEdit says, from a webhook's rules, whether to keep it and which objects it sees (nil: all).
type webhookEdit func([]admissionv1.RuleWithOperations) (keep bool, objectSelector *metav1.LabelSelector)

// apply reports whether to keep the webhook of these rules, and sets its object selector.
func (e webhookEdit) apply(rules []admissionv1.RuleWithOperations, selector **metav1.LabelSelector) bool {
	keep, sel := e(rules)
	if sel != nil {
		*selector = sel
	}
	return keep
}

// serveWebhooks installs webhook configurations pointed at a server on loopback with a
// certificate envtest makes, runs the program that serves them (start gets the serving options),
// and waits until it serves.
func (c *Cluster) serveWebhooks(name string, mutating []*admissionv1.MutatingWebhookConfiguration, validating []*admissionv1.ValidatingWebhookConfiguration,
	start func(envtest.WebhookInstallOptions) error) error {
	hooks := envtest.WebhookInstallOptions{LocalServingHost: "127.0.0.1"}
	for _, m := range mutating {
		hooks.MutatingWebhooks = append(hooks.MutatingWebhooks, m)
	}
	for _, v := range validating {
		hooks.ValidatingWebhooks = append(hooks.ValidatingWebhooks, v)
	}
	if err := hooks.PrepWithoutInstalling(); err != nil {
		return fmt.Errorf("preparing %s's webhooks: %w", name, err)
	}
	c.cleanup = append(c.cleanup, func() { _ = hooks.Cleanup() })
	if err := start(hooks); err != nil {
		return err
	}
	if err := hooks.Install(c.Env.Config); err != nil {
		return fmt.Errorf("installing %s's webhooks: %w", name, err)
	}
	return c.waitFor(name+"'s webhook server", func() bool {
		return ServesTLS(net.JoinHostPort(hooks.LocalServingHost, strconv.Itoa(hooks.LocalServingPort)))
	})
}

// controllerConfig is the configuration file of a controller built on controller-runtime's
// config API (JobSet's, Kueue's): no leader election, no certificate management of its own (the
// webhook certificate is envtest's, in certDir), the webhook server on loopback, a client rate
// that keeps up with thousands of objects, and then more, the controller's own settings.
func controllerConfig(apiVersion string, hooks envtest.WebhookInstallOptions, more string) string {
	return `apiVersion: ` + apiVersion + `
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
` + more
}

// jobSetFeatureGates turn on JobSet's Alpha ElasticJobSet gate, which lets a running JobSet
// resize its Indexed Jobs (an elastic TrainJob's scale). JobSet reads gates only from its
// configuration file.
const jobSetFeatureGates = `featureGates:
  ElasticJobSet: true
`

// startJobSet starts the JobSet controller, serving JobSet's webhooks on loopback.
func (c *Cluster) startJobSet(kubeconfig string) error {
	mutating, validating, err := jobSetWebhooks()
	if err != nil {
		return err
	}
	return c.serveWebhooks("JobSet", mutating, validating, func(hooks envtest.WebhookInstallOptions) error {
		config := filepath.Join(c.Dir, "jobset.yaml")
		if err := os.WriteFile(config, []byte(controllerConfig("config.jobset.x-k8s.io/v1alpha1", hooks, jobSetFeatureGates)), 0o600); err != nil {
			return err
		}
		return c.run("jobset-controller", []string{"KUBECONFIG=" + kubeconfig},
			"--config="+config, "--kubeconfig="+kubeconfig, "--metrics-bind-address=0", "--health-probe-bind-address=0")
	})
}

// moveJobSetWebhooks sends the API server's calls of JobSet's webhooks to a port of their own,
// beside a bare API server: StartManager serves them there as JobSet's controller would, as an
// administrator (JobSet's webhooks read PersistentVolumeClaims and pods, which the operator's
// RBAC does not let it), apart from the operator's, which act as the installed operator.
func (c *Cluster) moveJobSetWebhooks(ctx context.Context) error {
	addr, err := FreeAddr()
	if err != nil {
		return err
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if c.jobSetWebhookPort, err = strconv.Atoi(port); err != nil {
		return err
	}
	hooks := c.Env.WebhookInstallOptions
	from, to := ":"+strconv.Itoa(hooks.LocalServingPort)+"/", ":"+port+"/"
	isJobSets := func(name string) bool { return strings.HasPrefix(name, "jobset-") }
	return editWebhooks(ctx, c.Client, &hooks, isJobSets, func(w map[string]any) error {
		url, _, _ := unstructured.NestedString(w, "clientConfig", "url")
		return unstructured.SetNestedField(w, strings.Replace(url, from, to, 1), "clientConfig", "url")
	})
}
