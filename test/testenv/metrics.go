package testenv

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The local cluster's resource-metrics pipeline, as a real cluster's: metrics-server scrapes each
// node's /metrics/resource and serves metrics.k8s.io/v1beta1 through kube-apiserver's aggregator,
// for the HorizontalPodAutoscaler controller of kube-controller-manager and `kubectl top`.
//
//   - The fake nodes' /metrics/resource is KWOK's: the Metric that KWOK ships
//     (kustomize/metrics/resource) at /metrics/nodes/{nodeName}/metrics/resource, on KWOK's
//     server on loopback. A pod's usage is what its annotations UsageCPUAnnotation and
//     UsageMemoryAnnotation say (KWOK's shipped usage-from-annotation ClusterResourceUsage),
//     1m of CPU and 1Mi of memory without them. A change of an annotation is seen by the next
//     scrape; CPU is a counter that KWOK integrates over time, so the rate metrics-server
//     reports follows the new value within one or two metric resolutions.
//   - The real node's, when the cluster has one, is its kubelet's, at its address, port 10250.
//
// Each fake node carries the address 127.0.0.1 as ExternalIP, KWOK's port as its kubelet port
// and the metrics path as the annotation metrics.k8s.io/resource-metrics-path: metrics-server
// prefers ExternalIP, then InternalIP. Their InternalIP stays unreachable, as before, so that
// nothing else (the API server's logs and exec, pods' hostIP) changes.
const (
	// UsageCPUAnnotation is the CPU a pod on a fake node uses, as a quantity ("250m"), in every
	// one of its containers.
	UsageCPUAnnotation = "kwok.x-k8s.io/usage-cpu"
	// UsageMemoryAnnotation is the memory a pod on a fake node uses ("64Mi"), in every one of
	// its containers.
	UsageMemoryAnnotation = "kwok.x-k8s.io/usage-memory"

	// resourceMetricsPathAnnotation tells metrics-server where a node serves its resource
	// metrics, when not at /metrics/resource.
	resourceMetricsPathAnnotation = "metrics.k8s.io/resource-metrics-path"
	// metricsAPIService is the APIService of metrics.k8s.io/v1beta1, and metricsService the
	// Service it names, in kube-system.
	metricsAPIService = "v1beta1.metrics.k8s.io"
	metricsService    = "metrics-server"
	// frontProxyUser is the common name of the certificate the aggregator presents to
	// metrics-server: metrics-server takes the user the request is for from its headers only
	// when this name sent it.
	frontProxyUser = "front-proxy-client"
)

// DefaultMetricResolution is how often metrics-server scrapes the nodes: its minimum.
const DefaultMetricResolution = 10 * time.Second

// kwokMetricsConfig returns the Metric and ClusterResourceUsage KWOK ships, from the module cache
// of the KWOK that bin/kwok is built from (hack/tools/k8s), to add to KWOK's configuration.
func kwokMetricsConfig() (string, error) {
	dir, err := moduleDirIn(k8sToolsModule, "sigs.k8s.io/kwok")
	if err != nil {
		return "", err
	}
	var docs []string
	for _, file := range []string{"kustomize/metrics/resource/metrics-resource.yaml", "kustomize/metrics/usage/usage-from-annotation.yaml"} {
		data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(file)))
		if err != nil {
			return "", fmt.Errorf("reading KWOK's %s: %w", file, err)
		}
		docs = append(docs, strings.TrimPrefix(string(data), "---\n"))
	}
	return strings.Join(docs, "---\n"), nil
}

// k8sToolsModule is the build-only module bin/kwok is built from.
const k8sToolsModule = "hack/tools/k8s"

// kwokMetricsPath is where KWOK serves a fake node's resource metrics (its shipped Metric's path).
func kwokMetricsPath(node string) string { return "/metrics/nodes/" + node + "/metrics/resource" }

// configureFrontProxy makes a CA and a client certificate signed by it in dir, and tells the API
// server to present that certificate to the API servers it aggregates (metrics-server), and
// to publish the CA and the request headers that carry the user (in kube-system's ConfigMap
// extension-apiserver-authentication, which metrics-server reads), as a kubeadm cluster does.
func configureFrontProxy(dir string, set func(name, value string)) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTemplate := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "front-proxy-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	certDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: frontProxyUser},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"front-proxy-ca.crt":     pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		"front-proxy-client.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: certDER}),
		"front-proxy-client.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return err
		}
	}
	set("proxy-client-cert-file", filepath.Join(dir, "front-proxy-client.crt"))
	set("proxy-client-key-file", filepath.Join(dir, "front-proxy-client.key"))
	set("requestheader-client-ca-file", filepath.Join(dir, "front-proxy-ca.crt"))
	set("requestheader-allowed-names", frontProxyUser)
	set("requestheader-username-headers", "X-Remote-User")
	set("requestheader-group-headers", "X-Remote-Group")
	set("requestheader-extra-headers-prefix", "X-Remote-Extra-")
	return nil
}

// startMetricsServer runs metrics-server on loopback with a serving certificate made here, and
// registers it as metrics.k8s.io/v1beta1: an APIService whose Service is an ExternalName of
// 127.0.0.1 (the aggregator then calls https://127.0.0.1:<port>, checking the certificate for
// the Service's name). It scrapes every resolution.
func (c *Cluster) startMetricsServer(ctx context.Context, resolution time.Duration) error {
	kubeconfig, err := c.Kubeconfig("metrics-server")
	if err != nil {
		return err
	}
	dir := filepath.Join(c.Dir, "metrics-server")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	chain, key, err := certutil.GenerateSelfSignedCertKey(metricsService+".kube-system.svc", []net.IP{net.ParseIP("127.0.0.1")}, []string{"localhost"})
	if err != nil {
		return fmt.Errorf("issuing metrics-server's serving certificate: %w", err)
	}
	_, ca := pem.Decode(chain) // The serving certificate; the rest is its CA.
	for name, data := range map[string][]byte{"tls.crt": chain, "tls.key": key} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return err
		}
	}
	addr, err := FreeAddr()
	if err != nil {
		return err
	}
	_, port, _ := net.SplitHostPort(addr)
	if resolution == 0 {
		resolution = DefaultMetricResolution
	}
	if err := c.run("metrics-server", nil,
		"--kubeconfig="+kubeconfig, "--authentication-kubeconfig="+kubeconfig, "--authorization-kubeconfig="+kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port="+port,
		"--tls-cert-file="+filepath.Join(dir, "tls.crt"), "--tls-private-key-file="+filepath.Join(dir, "tls.key"),
		// The fake nodes' KWOK at 127.0.0.1 (ExternalIP) and the port in their status; the real
		// node's kubelet at its address, port 10250. Both serve self-signed certificates.
		"--kubelet-preferred-address-types=ExternalIP,InternalIP", "--kubelet-use-node-status-port", "--kubelet-insecure-tls",
		"--metric-resolution="+resolution.String(),
		// Below 90% of the resolution, as metrics-server requires (its default is 10 s).
		"--kubelet-request-timeout="+(resolution/2).String(),
		"-v=1"); err != nil {
		return err
	}
	if err := c.waitFor("metrics-server", func() bool { return ServesTLS(addr) }); err != nil {
		return err
	}
	objs, err := Decode([]byte(`apiVersion: v1
kind: Service
metadata:
  name: ` + metricsService + `
  namespace: kube-system
spec:
  type: ExternalName
  externalName: 127.0.0.1
  ports:
  - name: https
    port: ` + port + `
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: ` + metricsAPIService + `
spec:
  group: metrics.k8s.io
  version: v1beta1
  groupPriorityMinimum: 100
  versionPriority: 100
  caBundle: ` + base64.StdEncoding.EncodeToString(ca) + `
  service:
    name: ` + metricsService + `
    namespace: kube-system
    port: ` + port + `
`))
	if err != nil {
		return err
	}
	return Apply(ctx, c.Client, "testenv", objs...)
}

// SetPodUsage sets the CPU and memory (quantities, such as "250m" and "64Mi"; "" leaves one as
// it is) that the pods of namespace matching selector use on the fake nodes, per container, by
// their annotations UsageCPUAnnotation and UsageMemoryAnnotation. It returns how many pods it
// changed: pods on their way out, or gone since the list, are not. Pods created later, by a
// controller, have their template's annotations instead.
func (c *Cluster) SetPodUsage(ctx context.Context, namespace string, selector labels.Selector, cpu, memory string) (int, error) {
	annotations := map[string]string{}
	for name, q := range map[string]string{UsageCPUAnnotation: cpu, UsageMemoryAnnotation: memory} {
		if q == "" {
			continue
		}
		if _, err := resource.ParseQuantity(q); err != nil {
			return 0, fmt.Errorf("%s %q: %w", name, q, err)
		}
		annotations[name] = q
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return 0, err
	}
	pods := &corev1.PodList{}
	if err := c.Client.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: selector}); err != nil {
		return 0, err
	}
	changed := 0
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil {
			continue // on its way out: a scale-down removes pods while the list is read
		}
		err := c.Client.Patch(ctx, p, client.RawPatch(types.MergePatchType, patch))
		switch {
		case apierrors.IsNotFound(err):
			continue // gone since the list
		case err != nil:
			return changed, fmt.Errorf("setting the usage of pod %s: %w", p.Name, err)
		}
		changed++
	}
	return changed, nil
}

// PodMetrics is what metrics.k8s.io/v1beta1 reports of a pod: the usage of each of its
// containers over the window that ends at the timestamp.
type PodMetrics struct {
	Timestamp  time.Time `json:"timestamp"`
	Window     string    `json:"window"`
	Containers []struct {
		Name  string              `json:"name"`
		Usage corev1.ResourceList `json:"usage"`
	} `json:"containers"`
}

// Usage sums the usage of the pod's containers.
func (m *PodMetrics) Usage() corev1.ResourceList {
	sum := corev1.ResourceList{}
	for _, c := range m.Containers {
		for name, q := range c.Usage {
			total := sum[name]
			total.Add(q)
			sum[name] = total
		}
	}
	return sum
}

// PodMetrics reads a pod's metrics from metrics.k8s.io/v1beta1, as the HPA controller and
// `kubectl top pod` do, through the aggregator. It fails until metrics-server has two samples of
// the pod (one metric resolution after its start or more).
func (c *Cluster) PodMetrics(ctx context.Context, namespace, name string) (*PodMetrics, error) {
	clientset, err := kubernetes.NewForConfig(c.Env.Config)
	if err != nil {
		return nil, err
	}
	data, err := clientset.RESTClient().Get().AbsPath("/apis/metrics.k8s.io/v1beta1/namespaces", namespace, "pods", name).DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("metrics of pod %s/%s: %w", namespace, name, err)
	}
	m := &PodMetrics{}
	return m, json.Unmarshal(data, m)
}

// NodeUsage reads a node's usage from metrics.k8s.io/v1beta1, as `kubectl top node` does.
func (c *Cluster) NodeUsage(ctx context.Context, name string) (corev1.ResourceList, error) {
	clientset, err := kubernetes.NewForConfig(c.Env.Config)
	if err != nil {
		return nil, err
	}
	data, err := clientset.RESTClient().Get().AbsPath("/apis/metrics.k8s.io/v1beta1/nodes", name).DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("metrics of node %s: %w", name, err)
	}
	var m struct {
		Usage corev1.ResourceList `json:"usage"`
	}
	return m.Usage, json.Unmarshal(data, &m)
}

// kwokServerFlags are KWOK's flags for its server on loopback at addr, which serves the fake
// nodes' resource metrics: the port is also what KWOK's NodePort gives its stages.
func kwokServerFlags(addr string) []string {
	_, port, _ := net.SplitHostPort(addr)
	return []string{"--server-address=" + addr, "--node-port=" + port}
}

// kwokPort is the port of KWOK's server, as a node's kubelet port.
func kwokPort(addr string) int32 {
	_, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.ParseInt(port, 10, 32)
	return int32(p)
}
