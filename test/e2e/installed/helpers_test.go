package installed

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/procfs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/test/testenv"
)

// clientset is a typed client of the cluster, for logs and tokens.
func clientset(t require.TestingT) *kubernetes.Clientset {
	cs, err := kubernetes.NewForConfig(cluster.Env.Config)
	require.NoError(t, err)
	return cs
}

// logsOf returns the logs of the TrainJob's pods, by pod name, as the kubelet serves them.
func logsOf(t require.TestingT, tj *trainer.TrainJob) map[string]string {
	logs := map[string]string{}
	for _, p := range pods(t, tj) {
		data, err := clientset(t).CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(context.Background())
		if apierrors.IsNotFound(err) {
			continue
		}
		require.NoError(t, err, "logs of pod %s", p.Name)
		logs[p.Name] = string(data)
	}
	return logs
}

// explainOnFailure logs, when the test has failed, the TrainJob's status and each of its pods'
// state and log.
func explainOnFailure(t *testing.T, tj *trainer.TrainJob) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		if got := (&trainer.TrainJob{}); k8sClient.Get(context.Background(), client.ObjectKeyFromObject(tj), got) == nil {
			t.Logf("TrainJob %s: status %+v", tj.Name, got.Status)
		}
		for name, log := range logsOf(t, tj) {
			t.Logf("pod %s:\n%s", name, log)
		}
	})
}

var (
	buildPlugin sync.Once
	pluginPath  string
	pluginErr   error
)

// trainjobCLI runs `kubectl trainjob` (built from this tree once) as a cluster administrator
// would, in namespace ns, and returns what it printed.
func trainjobCLI(t *testing.T, ns string, args ...string) string {
	t.Helper()
	buildPlugin.Do(func() {
		dir, err := os.MkdirTemp("", "kubectl-trainjob-installed-")
		if err != nil {
			pluginErr = err
			return
		}
		pluginPath = filepath.Join(dir, "kubectl-trainjob")
		out, err := exec.Command("go", "build", "-o", pluginPath, filepath.Join(repoRoot(t), "cmd", "kubectl-trainjob")).CombinedOutput()
		if err != nil {
			pluginErr = fmt.Errorf("building the plugin: %v\n%s", err, out)
		}
	})
	require.NoError(t, pluginErr)
	kubeconfig, err := cluster.Kubeconfig("trainjob-cli")
	require.NoError(t, err)
	out, err := exec.Command(pluginPath, append([]string{"--kubeconfig", kubeconfig, "-n", ns}, args...)...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return string(out)
}

// metricsAreScrapedWithAToken scrapes the manager's metrics Service as Prometheus does with the
// install's ServiceMonitor (config/prometheus): HTTPS to the Service's address, with the token of
// a ServiceAccount bound to the trainjob-metrics-reader ClusterRole. Without a token the
// endpoint answers 401; with a token of a ServiceAccount not bound to it, 403.
func metricsAreScrapedWithAToken(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	reader := "prometheus"
	for _, name := range []string{reader, "stranger"} {
		require.NoError(t, k8sClient.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}))
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "trainjob-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: reader, Namespace: ns}},
	}
	require.NoError(t, k8sClient.Create(ctx, binding))
	t.Cleanup(func() { _ = k8sClient.Delete(ctx, binding) })

	svc := &corev1.Service{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKey{Namespace: testenv.OperatorNamespace, Name: metricsServiceName}, svc))
	url := "https://" + net.JoinHostPort(svc.Spec.ClusterIP, "8443") + "/metrics"
	scrape := func(c require.TestingT, token string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		require.NoError(c, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		// The manager's metrics certificate is its own, self-signed: the ServiceMonitor skips
		// verifying it, as Kubebuilder's does.
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // See above.
		resp, err := hc.Do(req)
		require.NoError(c, err)
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		require.NoError(c, err)
		return resp.StatusCode, string(data)
	}
	token := func(sa string) string {
		tr, err := clientset(t).CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		return tr.Status.Token
	}
	// Each replica serves its own metrics; the Service sends each scrape to one of them.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		code, body := scrape(c, token(reader))
		require.Equal(c, http.StatusOK, code, body)
		assert.Contains(c, body, "# TYPE rest_client_requests_total")
	}, polling.Timeout, polling.Interval)
	code, body := scrape(t, "")
	assert.Equal(t, http.StatusUnauthorized, code, body)
	code, body = scrape(t, token("stranger"))
	assert.Equal(t, http.StatusForbidden, code, body)
}

// killManager kills the manager process of a pod, as a crash or the node's OOM killer would:
// SIGKILL, with no chance to release its Lease. It then deletes the pod at once, so that the
// kubelet does not start the container again there: the Deployment replaces it elsewhere. It
// returns when the process was killed.
func killManager(t *testing.T, pod string) time.Time {
	t.Helper()
	procs, err := procfs.AllProcs()
	require.NoError(t, err)
	var killed []int
	for _, p := range procs {
		args, err := p.CmdLine()
		if err != nil || len(args) == 0 || args[0] != "/manager" {
			continue
		}
		environ, err := p.Environ()
		if err != nil || !slices.Contains(environ, "HOSTNAME="+pod) {
			continue
		}
		require.NoError(t, syscall.Kill(p.PID, syscall.SIGKILL))
		killed = append(killed, p.PID)
	}
	require.Len(t, killed, 1, "manager processes of pod %s", pod)
	at := time.Now()
	err = k8sClient.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: testenv.OperatorNamespace, Name: pod}},
		client.GracePeriodSeconds(0))
	require.NoError(t, client.IgnoreNotFound(err))
	return at
}

// cordon marks a node unschedulable, or schedulable again, as kubectl cordon and uncordon do;
// the node is made schedulable again when the test ends.
func cordon(t *testing.T, node string, unschedulable bool) {
	t.Helper()
	patch := []byte(fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, unschedulable))
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	require.NoError(t, k8sClient.Patch(context.Background(), n, client.RawPatch(types.StrategicMergePatchType, patch)))
	if unschedulable {
		t.Cleanup(func() {
			_ = k8sClient.Patch(context.Background(), n, client.RawPatch(types.StrategicMergePatchType, []byte(`{"spec":{"unschedulable":false}}`)))
		})
	}
}
