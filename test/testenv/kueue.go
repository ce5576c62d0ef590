package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	trainer "github.com/trainjob/operator/api/v1alpha1"
)

// kueueToolsModule is the build-only module bin/kueue is built from (see hack/tools.mk).
const kueueToolsModule = "hack/tools/kueue"

// kueueWebhooks returns Kueue's webhooks for its own objects and for TrainJobs: the only
// integration the local cluster turns on. A release installs webhooks for every workload kind
// (pods, Jobs, JobSets, ...), which a disabled integration answers with a no-op; leaving them out
// keeps Kueue off the path of every other object of the cluster. Its TrainJob webhooks see only
// TrainJobs that name a queue, as docs/kueue.md recommends: unscoped, they read every TrainJob
// with upstream Trainer's types (refusing those they cannot decode) and refuse any change to a
// TrainJob whose runtime is gone, queued or not.
// In the namespaces where Kueue manages TrainJobs without a queue (KueueManagesUnlabelledLabel), a
// copy of each TrainJob webhook sees those too, as in a cluster where Kueue manages them all.
func kueueWebhooks() ([]*admissionv1.MutatingWebhookConfiguration, []*admissionv1.ValidatingWebhookConfiguration, error) {
	queued := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: trainer.KueueQueueLabel, Operator: metav1.LabelSelectorOpExists}}}
	unqueued := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: trainer.KueueQueueLabel, Operator: metav1.LabelSelectorOpDoesNotExist}}}
	managed := &metav1.LabelSelector{MatchLabels: map[string]string{KueueManagesUnlabelledLabel: "true"}}
	trainJobs := func(rules []admissionv1.RuleWithOperations) bool {
		return slices.ContainsFunc(rules, func(r admissionv1.RuleWithOperations) bool { return slices.Contains(r.Resources, "trainjobs") })
	}
	mutating, validating, err := moduleWebhooks(kueueCRD, "kueue-", func(rules []admissionv1.RuleWithOperations) (bool, *metav1.LabelSelector) {
		if trainJobs(rules) {
			return true, queued
		}
		return slices.ContainsFunc(rules, func(r admissionv1.RuleWithOperations) bool { return slices.Contains(r.APIGroups, "kueue.x-k8s.io") }), nil
	})
	for _, m := range mutating {
		for _, w := range m.Webhooks {
			if trainJobs(w.Rules) {
				w.Name, w.ObjectSelector, w.NamespaceSelector = "unqueued-"+w.Name, unqueued, managed
				m.Webhooks = append(m.Webhooks, w)
			}
		}
	}
	for _, v := range validating {
		for _, w := range v.Webhooks {
			if trainJobs(w.Rules) {
				w.Name, w.ObjectSelector, w.NamespaceSelector = "unqueued-"+w.Name, unqueued, managed
				v.Webhooks = append(v.Webhooks, w)
			}
		}
	}
	return mutating, validating, err
}

// KueueManagesUnlabelledLabel on a namespace makes Kueue manage its TrainJobs that name no queue
// too (Kueue's manageJobsWithoutQueueName, within its managedJobsNamespaceSelector), as a cluster
// configured so does; elsewhere it manages only those that name one.
const KueueManagesUnlabelledLabel = "trainjob.test/kueue-manages-unlabelled"

// kueueConfig is Kueue's configuration: the TrainJob integration only, no metrics or health
// servers (their ports would collide between clusters), and TrainJobs without a queue managed in
// the namespaces labelled KueueManagesUnlabelledLabel (with the feature gate
// ManagedJobsNamespaceSelectorAlwaysRespected off, so that those naming a queue are managed in
// every namespace).
const kueueConfig = `health:
  healthProbeBindAddress: "0"
metrics:
  bindAddress: "0"
manageJobsWithoutQueueName: true
managedJobsNamespaceSelector:
  matchLabels:
    ` + KueueManagesUnlabelledLabel + `: "true"
integrations:
  frameworks:
  - trainer.kubeflow.org/trainjob
`

// kueueMetricsCertDir is where Kueue, when it does not manage its certificates itself, reads the
// certificate of its metrics server, whether or not that server runs. The path is fixed in
// Kueue's main package.
const kueueMetricsCertDir = "/etc/kueue/metrics/certs"

// provideKueueMetricsCert puts a certificate where Kueue reads its metrics server's, unless one is
// there: any will do, as the metrics server does not run. It is left there for the next cluster.
func provideKueueMetricsCert(from string) error {
	for _, name := range []string{"tls.crt", "tls.key"} {
		dst := filepath.Join(kueueMetricsCertDir, name)
		if _, err := os.Stat(dst); err == nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join(from, name))
		if err != nil {
			return err
		}
		if err := os.MkdirAll(kueueMetricsCertDir, 0o755); err != nil {
			return fmt.Errorf("Kueue needs a certificate in %s (a path fixed in Kueue): %w", kueueMetricsCertDir, err)
		}
		// Written aside and renamed, so that a cluster starting beside this one never reads half.
		tmp, err := os.CreateTemp(kueueMetricsCertDir, name)
		if err != nil {
			return err
		}
		_, werr := tmp.Write(data)
		if err := errors.Join(werr, tmp.Close(), os.Rename(tmp.Name(), dst)); err != nil {
			return err
		}
	}
	return nil
}

// startKueue installs Kueue's CRDs and starts Kueue, serving its webhooks on loopback.
func (c *Cluster) startKueue(LocalOptions) error {
	kubeconfig, err := c.Kubeconfig("kueue")
	if err != nil {
		return err
	}
	crds, err := crdPaths(&settings{crds: []crd{kueueCRD}})
	if err != nil {
		return err
	}
	if _, err := envtest.InstallCRDs(c.Env.Config, envtest.CRDInstallOptions{Paths: crds, ErrorIfPathMissing: true}); err != nil {
		return fmt.Errorf("installing Kueue's CRDs: %w", err)
	}
	mutating, validating, err := kueueWebhooks()
	if err != nil {
		return err
	}
	return c.serveWebhooks("Kueue", mutating, validating, func(hooks envtest.WebhookInstallOptions) error {
		if err := provideKueueMetricsCert(hooks.LocalServingCertDir); err != nil {
			return err
		}
		config := filepath.Join(c.Dir, "kueue.yaml")
		if err := os.WriteFile(config, []byte(controllerConfig("config.kueue.x-k8s.io/v1beta2", hooks, kueueConfig)), 0o600); err != nil {
			return err
		}
		// The visibility server is an aggregated API that the local cluster does not register.
		return c.run("kueue", []string{"KUBECONFIG=" + kubeconfig},
			"--config="+config, "--feature-gates=VisibilityOnDemand=false,ManagedJobsNamespaceSelectorAlwaysRespected=false", "--zap-log-level=2")
	})
}
