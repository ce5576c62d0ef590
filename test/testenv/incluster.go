package testenv

import (
	"context"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// What a real node's pods need to be in-cluster clients (LocalOptions.InCluster).
const (
	// kubernetesServiceIP is the kubernetes Service's address, the first of envtest's Service
	// range (10.0.0.0/24): where client-go's in-cluster configuration sends a pod.
	kubernetesServiceIP = "10.0.0.1"
	// clusterDomain is the real node's kubelet's and CoreDNS's DNS domain.
	clusterDomain = "cluster.local"
)

// configureInCluster makes the API server reachable from the real node's pods, as a cluster's
// is: it serves on the node's address (a pod's loopback is its own), which it advertises and the
// kubernetes Service then leads to; its certificate names the Service's address and names,
// as a cluster's API server certificate does, so that client-go's in-cluster configuration
// trusts it with the CA of the kube-root-ca.crt ConfigMap. And pods get their ServiceAccount's
// token: envtest disables the ServiceAccount admission plugin, which mounts it.
//
// envtest writes its own certificates only when the API server's folder has none: these are
// written there first, with the files envtest would write, and its CA set for the kubeconfigs.
func configureInCluster(apiServer *envtest.APIServer) error {
	ip, err := NodeIP()
	if err != nil {
		return err
	}
	names := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
		"kubernetes.default.svc." + clusterDomain}
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(kubernetesServiceIP)}
	chain, key, err := certutil.GenerateSelfSignedCertKey(ip, ips, names)
	if err != nil {
		return fmt.Errorf("issuing the API server's certificate: %w", err)
	}
	_, ca := pem.Decode(chain) // The serving certificate; then its CA.
	// The ServiceAccount tokens' signing key; its certificate's public key checks them.
	saCert, saKey, err := certutil.GenerateSelfSignedCertKey("service-accounts", nil, nil)
	if err != nil {
		return fmt.Errorf("making the service account signing key: %w", err)
	}
	files := map[string][]byte{"apiserver.crt": chain, "apiserver.key": key, "sa-signer.crt": saCert, "sa-signer.key": saKey}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(apiServer.CertDir, name), data, 0o600); err != nil {
			return err
		}
	}
	apiServer.SecureServing.CA = ca
	// On the node's address alone, not every one of this machine's: the clients' kubeconfigs
	// name it too. envtest takes a port it is given with its address.
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return err
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	_ = l.Close()
	apiServer.SecureServing.Address, apiServer.SecureServing.Port = ip, port
	apiServer.Configure().
		Set("advertise-address", ip).
		Disable("disable-admission-plugins")
	return nil
}

// startKubeProxy runs kube-proxy for the real node in iptables mode, so that a Service's
// address leads to its endpoints from the real node's pods and from this machine (kube-proxy's
// rules are this machine's: the API server calls webhooks at their Service's address). It
// masquerades all Service traffic: a pod that reaches another pod of its bridge through a
// Service then gets the answer back through this machine, without bridge netfilter, which
// this machine's settings are left without. This machine's root may not lower a process's
// oom_score_adj: kube-proxy must not try. The rules are removed when the cluster stops, and
// before kube-proxy starts (a killed run's). One such cluster per machine, as one real node.
func (c *Cluster) startKubeProxy(ip string) error {
	kubeconfig, err := c.Kubeconfig("kube-proxy")
	if err != nil {
		return err
	}
	metrics, err := FreeAddr()
	if err != nil {
		return err
	}
	healthz, err := FreeAddr()
	if err != nil {
		return err
	}
	config := filepath.Join(c.Dir, "real-node", "kube-proxy.yaml")
	if err := os.WriteFile(config, []byte(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: `+kubeconfig+`
mode: iptables
hostnameOverride: `+RealNodeName+`
bindAddress: `+ip+`
clusterCIDR: `+podSubnet+`
detectLocalMode: ClusterCIDR
metricsBindAddress: `+metrics+`
healthzBindAddress: `+healthz+`
oomScoreAdj: 0
iptables:
  masqueradeAll: true
  localhostNodePorts: false
conntrack:
  maxPerCore: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`), 0o644); err != nil {
		return err
	}
	// A run killed before it could clean up left its rules: start from none.
	c.removeKubeProxyRules()
	if err := c.run("kube-proxy", nil, "--config="+config, "-v=1"); err != nil {
		return err
	}
	c.cleanup = append(c.cleanup, func() { c.removeKubeProxyRules() })
	// This machine reaches the API server at the kubernetes Service's address once the rules are in.
	return c.waitFor("kube-proxy's rules for the kubernetes Service", func() bool { return servesAt(kubernetesServiceIP + ":443") })
}

// servesAt reports whether something accepts TCP connections at addr.
func servesAt(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

// removeKubeProxyRules removes kube-proxy's chains and rules from this machine, as
// `kube-proxy --cleanup` does, once kube-proxy has stopped.
func (c *Cluster) removeKubeProxyRules() {
	assets, err := AssetsDir()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = exec.CommandContext(ctx, filepath.Join(assets, "kube-proxy"), "--cleanup", "--proxy-mode=iptables").Run()
}
