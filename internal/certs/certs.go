// Package certs provides the webhook server's certificate. By default the manager makes and
// rotates it itself with cert-controller, which keeps it in a Secret of the operator's namespace
// (mounted into the pod) and injects its CA into the webhook configurations. When the certificate
// comes from elsewhere (cert-manager, or `make run`'s local control plane) there is nothing to do.
package certs

import (
	"fmt"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
)

// Options name what the rotator manages. The defaults in cmd/main.go match config/default.
type Options struct {
	// Namespace is the operator's namespace, where the Secret is.
	Namespace string
	// SecretName is the Secret that holds the certificate; the Deployment mounts it at CertDir.
	SecretName string
	// ServiceName is the webhook Service; the certificate is for <ServiceName>.<Namespace>.svc.
	ServiceName string
	// ValidatingWebhookConfiguration and MutatingWebhookConfiguration get the CA injected.
	ValidatingWebhookConfiguration, MutatingWebhookConfiguration string
	// APIService gets the CA injected, for an aggregated API server (the history's).
	APIService string
	// CertDir is where the webhook server reads tls.crt and tls.key.
	CertDir string
	// ControllerName names the rotator's controller, unique in the process; empty means
	// cert-controller's own name. A test that starts a second manager gives another.
	ControllerName string
}

// The rotator reads and updates its own Secret in the operator's namespace only; the operator's
// cluster-wide role can create Secrets but never read them.
// +kubebuilder:rbac:groups="",namespace=system,resources=secrets,verbs=get;list;watch;create;update;patch
// It watches webhook configurations, which RBAC cannot narrow by name, and changes only its own
// two, by their installed names (cmd/main.go's defaults).
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations;mutatingwebhookconfigurations,verbs=get;list;watch
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations,resourceNames=trainjob-validating-webhook-configuration,verbs=update;patch
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations,resourceNames=trainjob-mutating-webhook-configuration,verbs=update;patch

// Provided is for a certificate made elsewhere: it is ready from the start.
func Provided() <-chan struct{} {
	ready := make(chan struct{})
	close(ready)
	return ready
}

// injected are the objects that get the CA: those Options name.
func (o Options) injected() []rotator.WebhookInfo {
	var out []rotator.WebhookInfo
	for _, w := range []rotator.WebhookInfo{
		{Name: o.ValidatingWebhookConfiguration, Type: rotator.Validating},
		{Name: o.MutatingWebhookConfiguration, Type: rotator.Mutating},
		{Name: o.APIService, Type: rotator.APIService},
	} {
		if w.Name != "" {
			out = append(out, w)
		}
	}
	return out
}

// Rotate adds cert-controller's rotator to the manager. The returned channel is closed once the
// certificate is in CertDir, so that the webhook server can start serving it.
func Rotate(mgr ctrl.Manager, o Options) (<-chan struct{}, error) {
	ready := make(chan struct{})
	err := rotator.AddRotator(mgr, &rotator.CertRotator{
		SecretKey:      types.NamespacedName{Namespace: o.Namespace, Name: o.SecretName},
		CertDir:        o.CertDir,
		CAName:         "trainjob-operator-ca",
		CAOrganization: "trainjob-operator",
		DNSName:        fmt.Sprintf("%s.%s.svc", o.ServiceName, o.Namespace),
		IsReady:        ready,
		Webhooks:       o.injected(),
		// Every replica serves webhooks, leader or not, so every replica needs the certificate.
		RequireLeaderElection: false,
		ControllerName:        o.ControllerName,
	})
	if err != nil {
		return nil, fmt.Errorf("adding the certificate rotator: %w", err)
	}
	return ready, nil
}
