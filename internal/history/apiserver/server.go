// Package apiserver serves the history's records as history.trainer.kubeflow.org/v1alpha1
// TrainJobRuns: an API server the cluster's API server aggregates (an APIService), as
// metrics-server is, so that users read runs with their own credentials and RBAC through the
// API server, with kubectl. It authenticates and authorizes each request by the API server
// (delegated): its front proxy's certificate and the user it names, TokenReviews and
// SubjectAccessReviews.
package apiserver

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	basecompatibility "k8s.io/component-base/compatibility"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/history"
	"github.com/trainjob/operator/internal/history/apis/openapi"
	historyv1alpha1 "github.com/trainjob/operator/internal/history/apis/v1alpha1"
)

var (
	scheme = runtime.NewScheme()
	codecs = serializer.NewCodecFactory(scheme)
)

func init() {
	if err := historyv1alpha1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	metav1.AddToGroupVersion(scheme, historyv1alpha1.GroupVersion)
	// The fields a list selects by (FieldSelectors); the API server refuses others before the
	// list sees them.
	err := scheme.AddFieldLabelConversionFunc(historyv1alpha1.GroupVersion.WithKind("TrainJobRun"), func(label, value string) (string, string, error) {
		if slices.Contains(FieldSelectors, label) {
			return label, value, nil
		}
		return "", "", fmt.Errorf("field selector %q: the history selects by %s", label, strings.Join(FieldSelectors, ", "))
	})
	if err != nil {
		panic(err)
	}
}

// apiServerLibrary is the version of k8s.io/apiserver in go.mod, as a Kubernetes version.
const apiServerLibrary = "1.36"

// Options are where and how the history's API server serves.
type Options struct {
	// BindAddress and Port are where it listens.
	BindAddress string
	Port        int
	// CertDir holds its serving certificate, tls.crt and tls.key; where it has none, the server
	// makes a self-signed one there, for localhost and DNSNames.
	CertDir  string
	DNSNames []string
	// Kubeconfig is the API server to delegate authentication and authorization to: the
	// cluster's own (in-cluster) when empty.
	Kubeconfig string
}

// New is the history's API server, serving store.
func New(opts Options, store *history.Store) (*genericapiserver.GenericAPIServer, error) {
	secure := genericoptions.NewSecureServingOptions().WithLoopback()
	secure.BindAddress = net.ParseIP(opts.BindAddress)
	secure.BindPort = opts.Port
	secure.ServerCert.CertDirectory = opts.CertDir
	secure.ServerCert.PairName = "tls"
	if err := secure.MaybeDefaultWithSelfSignedCerts("localhost", opts.DNSNames, []net.IP{net.ParseIP("127.0.0.1")}); err != nil {
		return nil, fmt.Errorf("making a self-signed serving certificate: %w", err)
	}
	authn := genericoptions.NewDelegatingAuthenticationOptions()
	authn.RemoteKubeConfigFile = opts.Kubeconfig
	authz := genericoptions.NewDelegatingAuthorizationOptions()
	authz.RemoteKubeConfigFile = opts.Kubeconfig
	// Only the probes go unauthorized: everything else is a user's request, checked.
	authz.AlwaysAllowPaths = []string{"/healthz", "/readyz", "/livez"}

	config := genericapiserver.NewConfig(codecs)
	// The Kubernetes version of the API server library it is built with.
	config.EffectiveVersion = basecompatibility.NewEffectiveVersionFromString(apiServerLibrary, "", "")
	if err := secure.ApplyTo(&config.SecureServing, &config.LoopbackClientConfig); err != nil {
		return nil, err
	}
	if err := authn.ApplyTo(&config.Authentication, config.SecureServing, nil); err != nil {
		return nil, fmt.Errorf("delegating authentication: %w", err)
	}
	if err := authz.ApplyTo(&config.Authorization); err != nil {
		return nil, fmt.Errorf("delegating authorization: %w", err)
	}
	// The API's schema, for kubectl explain and the API server's field management.
	namer := openapinamer.NewDefinitionNamer(scheme)
	config.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(openapi.GetOpenAPIDefinitions, namer)
	config.OpenAPIConfig.Info.Title, config.OpenAPIConfig.Info.Version = "TrainJob history", historyv1alpha1.GroupVersion.Version
	config.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(openapi.GetOpenAPIDefinitions, namer)
	config.OpenAPIV3Config.Info.Title, config.OpenAPIV3Config.Info.Version = "TrainJob history", historyv1alpha1.GroupVersion.Version
	config.Authorization.Authorizer = readersOfTrainJobs{config.Authorization.Authorizer}
	server, err := config.Complete(nil).New("trainjob-history", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, err
	}
	group := genericapiserver.NewDefaultAPIGroupInfo(historyv1alpha1.GroupVersion.Group, scheme, metav1.ParameterCodec, codecs)
	group.VersionedResourcesStorageMap[historyv1alpha1.GroupVersion.Version] = map[string]rest.Storage{
		historyv1alpha1.Resource: &runs{store: store, now: time.Now},
	}
	if err := server.InstallAPIGroup(&group); err != nil {
		return nil, err
	}
	return server, nil
}

// readersOfTrainJobs lets a user read the runs of a namespace only if they may also read its
// TrainJobs: the API server has already authorized the request for runs (RBAC on
// trainjobruns, which config/history's roles give to view, edit and admin); the history asks
// again for the same request on TrainJobs (a run named for its TrainJob as that TrainJob).
type readersOfTrainJobs struct {
	authorizer.Authorizer
}

func (a readersOfTrainJobs) Authorize(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	decision, reason, err := a.Authorizer.Authorize(ctx, attrs)
	if decision != authorizer.DecisionAllow || !attrs.IsResourceRequest() ||
		attrs.GetAPIGroup() != historyv1alpha1.GroupVersion.Group || attrs.GetResource() != historyv1alpha1.Resource {
		return decision, reason, err
	}
	name := attrs.GetName()
	if m := uidSuffix.FindStringSubmatch(name); m != nil {
		name = strings.TrimSuffix(name, m[0])
	}
	decision, _, err = a.Authorizer.Authorize(ctx, authorizer.AttributesRecord{
		User: attrs.GetUser(), Verb: attrs.GetVerb(), Namespace: attrs.GetNamespace(), Name: name,
		APIGroup: trainer.GroupVersion.Group, APIVersion: trainer.GroupVersion.Version, Resource: "trainjobs",
		ResourceRequest: true, Path: attrs.GetPath(),
	})
	if decision != authorizer.DecisionAllow {
		return authorizer.DecisionDeny, fmt.Sprintf("the runs of TrainJobs are read by those who may %s trainjobs.trainer.kubeflow.org here", attrs.GetVerb()), err
	}
	return decision, "", err
}
