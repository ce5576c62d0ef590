package testenv

import (
	"context"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/trainjob/operator/internal/controller"
	"github.com/trainjob/operator/internal/history"
)

// HistoryAPIService is the APIService of the history's API.
const HistoryAPIService = "v1alpha1.history.trainer.kubeflow.org"

// StartHistory runs the history program (cmd/history) beside the cluster, as the installed
// history with its RBAC, recording into database (a SQLite file, or a postgres:// URL) and
// serving its API on loopback, registered with the API server as the install registers it.
func (c *Cluster) StartHistory(ctx context.Context, binary, database string) error {
	kubeconfig, err := c.HistoryKubeconfig(ctx, "history")
	if err != nil {
		return err
	}
	dir := filepath.Join(c.Dir, "history")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	addr, err := FreeAddr()
	if err != nil {
		return err
	}
	_, port, _ := net.SplitHostPort(addr)
	if binary, err = filepath.Abs(binary); err != nil {
		return err
	}
	if err := c.run(binary, []string{"POD_NAMESPACE=" + OperatorNamespace},
		"--kubeconfig="+kubeconfig, "--authentication-kubeconfig="+kubeconfig, "--database="+database,
		"--bind-address=127.0.0.1", "--secure-port="+port, "--cert-dir="+dir,
		"--health-probe-bind-address=0", "--metrics-bind-address=0"); err != nil {
		return err
	}
	if err := c.waitFor("the history's API server", func() bool { return ServesTLS(addr) }); err != nil {
		return err
	}
	p, _ := strconv.Atoi(port)
	return c.RegisterHistoryAPI(ctx, p, filepath.Join(dir, "tls.crt"))
}

// RegisterHistoryAPI registers the history's API served on loopback at port, with the
// certificate chain in certFile (its serving certificate, then the CA that signed it): an
// APIService whose Service is an ExternalName of 127.0.0.1, named as the install names it, so
// that the certificate is checked for trainjob-history.trainjob-system.svc.
func (c *Cluster) RegisterHistoryAPI(ctx context.Context, port int, certFile string) error {
	chain, err := os.ReadFile(certFile)
	if err != nil {
		return err
	}
	_, ca := pem.Decode(chain)
	if len(ca) == 0 {
		return fmt.Errorf("%s holds no CA after its certificate", certFile)
	}
	objs, err := Decode([]byte(`apiVersion: v1
kind: Namespace
metadata:
  name: ` + OperatorNamespace + `
---
apiVersion: v1
kind: Service
metadata:
  name: trainjob-history
  namespace: ` + OperatorNamespace + `
spec:
  type: ExternalName
  externalName: 127.0.0.1
  ports:
  - name: https
    port: ` + strconv.Itoa(port) + `
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: ` + HistoryAPIService + `
spec:
  group: history.trainer.kubeflow.org
  version: v1alpha1
  groupPriorityMinimum: 1000
  versionPriority: 100
  caBundle: ` + base64.StdEncoding.EncodeToString(ca) + `
  service:
    name: trainjob-history
    namespace: ` + OperatorNamespace + `
    port: ` + strconv.Itoa(port) + `
`))
	if err != nil {
		return err
	}
	return Apply(ctx, c.Client, "testenv", objs...)
}

// StartRecorder runs the history's recorder in this process, over store, as the installed
// history with its RBAC and cache, until stop is called.
func (c *Cluster) StartRecorder(ctx context.Context, store *history.Store) (stop func() error, err error) {
	cfg, err := c.HistoryConfig(ctx)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = history.DefaultKubeAPIQPS, history.DefaultKubeAPIBurst // cmd/history's
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: Scheme, Cache: history.CacheOptions(OperatorNamespace),
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
	})
	if err != nil {
		return nil, err
	}
	// Settling a second, not cmd/history's 10: the tests wait for records of runs that go on.
	recorder := &history.Recorder{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Store: store, Frameworks: controller.Frameworks(""),
		Settle: time.Second}
	if err := recorder.SetupWithManager(mgr); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	var stopErr error
	return func() error {
		once.Do(func() {
			cancel()
			stopErr = <-done
		})
		return stopErr
	}, nil
}
