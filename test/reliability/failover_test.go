package reliability

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

// replica is a manager run with leader election and its webhook server on its own port.
type replica struct {
	*testenv.Program
	user, webhookAddr string
}

func startReplica(t *testing.T, user string) *replica {
	t.Helper()
	hooks := cluster.Env.WebhookInstallOptions
	addr, err := testenv.FreeAddr()
	require.NoError(t, err)
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	p := startManager(t, user, []string{"ENABLE_WEBHOOKS=true", "POD_NAMESPACE=" + testenv.OperatorNamespace},
		"--leader-elect", "--leader-elect-namespace="+testenv.OperatorNamespace,
		"--webhook-cert-path="+hooks.LocalServingCertDir, "--webhook-host="+hooks.LocalServingHost, "--webhook-port="+port)
	t.Cleanup(func() {
		if t.Failed() {
			data, _ := os.ReadFile(p.Log())
			t.Logf("the end of %s's log:\n%s", user, lastLines(string(data), 15))
		}
	})
	return &replica{Program: p, user: user, webhookAddr: net.JoinHostPort(hooks.LocalServingHost, port)}
}

// logs tells whether the replica's log has a line with text.
func (r *replica) logs(text string) bool {
	data, err := os.ReadFile(r.Log())
	return err == nil && strings.Contains(string(data), text)
}

// Lines client-go's leader election logs.
const (
	acquiredLease  = "Successfully acquired lease"
	acquiringLease = "Attempting to acquire leader lease"
)

// TestOnlyTheLeaderWritesAndAStandbyTakesOver runs two replicas with leader election: both answer
// admission requests, only the leader writes (the API server's audit log says who wrote what);
// the leader is killed (SIGKILL, no lease released) while TrainJobs arrive, and the other takes
// over when the lease expires and finishes the work, every child made exactly once. Then the new
// leader is stopped (SIGTERM): it releases the lease, and a third replica leads at once. The
// takeover times are logged, for docs/reliability.md.
func TestOnlyTheLeaderWritesAndAStandbyTakesOver(t *testing.T) {
	ns := utiltesting.NewNamespace(t, k8sClient, "failover")
	createGangRuntime(t)
	seen := watchChildren(t, ns)

	a := startReplica(t, "manager-a")
	require.Eventually(t, func() bool { return a.logs(acquiredLease) }, time.Minute, interval, "the first replica does not lead")
	b := startReplica(t, "manager-b")
	defer b.Stop()
	require.Eventually(t, func() bool { return b.logs(acquiringLease) && testenv.ServesTLS(b.webhookAddr) }, timeout, interval,
		"the second replica does not wait for the lease, or serves no webhooks")

	// Both replicas' webhooks answer, the same.
	bad := utiltesting.MakeTrainJob("bad", ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch-distributed").Obj()
	bad.Spec.Trainer = &trainer.Trainer{Env: []corev1.EnvVar{{Name: "PET_NNODES", Value: "3"}}}
	for _, r := range []*replica{a, b} {
		resp := admit(t, r.webhookAddr, bad)
		assert.False(t, resp.Allowed, "replica %s admitted a TrainJob that sets PET_NNODES", r.user)
		assert.Contains(t, resp.Result.Message, "spec.trainer.env[0].name", "replica %s", r.user)
	}

	jobs := mix(100, false)
	submittedAll := make(chan error, 1)
	go func() { submittedAll <- submit(context.Background(), ns, jobs, 8*time.Second) }()
	time.Sleep(4 * time.Second)
	a.Kill()
	killed := time.Now()
	t.Logf("killed the leader with %d of %d JobSets made", seen.count("JobSet"), len(jobs))
	require.NoError(t, <-submittedAll)
	converged(t, ns, jobs)
	seen.check(t, ns, jobs)

	// The audit log: who wrote when.
	events, err := cluster.AuditLog()
	require.NoError(t, err)
	leadsFrom := firstWrite(events, b.user, "leases")
	if leadsFrom.IsZero() {
		leadsFrom = time.Now() // It never led: every write it made was one too many.
	}
	var writesA, early, warmed, listed []string
	for _, e := range events {
		at := e.RequestReceivedTimestamp.Time
		what := e.Verb + " " + resourceOf(e)
		switch {
		case !isWrite(e):
			// Its caches were the leader's while it stood by: it took the lead without listing
			// what its caches hold (every kind, in every namespace; client-go lists by a watch
			// that sends the objects first), which at size takes as long as a restart.
			if e.User.Username != b.user || e.ObjectRef == nil || e.ObjectRef.Namespace != "" ||
				(e.Verb != "list" && !(e.Verb == "watch" && strings.Contains(e.RequestURI, "sendInitialEvents=true"))) {
				break
			}
			if at.Before(leadsFrom) {
				warmed = append(warmed, what)
			} else {
				listed = append(listed, what)
			}
		case e.User.Username == a.user:
			writesA = append(writesA, what)
			// A request the leader sent as it died may be read by the API server a moment later.
			assert.False(t, at.After(killed.Add(time.Second)), "the killed replica wrote after its death: %s", what)
		case e.User.Username == b.user && at.Before(leadsFrom):
			early = append(early, what)
		}
	}
	assert.NotEmpty(t, writesA, "the leader wrote nothing")
	assert.Empty(t, early, "the replica that did not lead wrote")
	assert.Contains(t, warmed, "watch jobsets", "the audit log shows no list of the standby's: nothing to tell a cold takeover by")
	assert.Empty(t, listed, "the new leader listed, after it took the lead")
	resumed := firstWrite(events, b.user, "jobsets")
	require.False(t, resumed.IsZero(), "the new leader made no JobSet")
	t.Logf("takeover after SIGKILL of the leader: lease taken %s after the kill, first JobSet %s after it (lease duration 15s, retry period 2s)",
		leadsFrom.Sub(killed).Round(10*time.Millisecond), resumed.Sub(killed).Round(10*time.Millisecond))
	assert.Empty(t, errorLines(t, b.Program), "errors in the new leader's log")

	// A leader stopped as in a rollout releases the lease: the next one leads at once.
	c := startReplica(t, "manager-c")
	defer c.Stop()
	require.Eventually(t, func() bool { return c.logs(acquiringLease) }, timeout, interval)
	b.Stop()
	stopped := time.Now()
	require.Eventually(t, func() bool { return c.logs(acquiredLease) }, 30*time.Second, 50*time.Millisecond, "no replica leads after the leader stopped")
	events, err = cluster.AuditLog()
	require.NoError(t, err)
	t.Logf("takeover after SIGTERM of the leader: lease taken %s after the stop began",
		firstWrite(events, c.user, "leases").Sub(stopped).Round(10*time.Millisecond))
}

// isWrite tells a write from a list or a watch: the audit log has both.
func isWrite(e auditv1.Event) bool {
	return e.Verb != "list" && e.Verb != "watch" && e.Verb != "get"
}

// firstWrite is when the API server received user's first successful write of a resource, or
// zero.
func firstWrite(events []auditv1.Event, user, resource string) time.Time {
	for _, e := range events {
		if e.User.Username == user && isWrite(e) && resourceOf(e) == resource && e.ResponseStatus != nil && e.ResponseStatus.Code < 300 {
			return e.RequestReceivedTimestamp.Time
		}
	}
	return time.Time{}
}

func resourceOf(e auditv1.Event) string {
	if e.ObjectRef == nil {
		return ""
	}
	return e.ObjectRef.Resource
}

// admit asks the webhook server at addr whether it admits creating tj.
func admit(t *testing.T, addr string, tj *trainer.TrainJob) *admissionv1.AdmissionResponse {
	t.Helper()
	raw, err := json.Marshal(tj)
	require.NoError(t, err)
	gv := trainer.GroupVersion
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       "failover",
			Kind:      metav1.GroupVersionKind{Group: gv.Group, Version: gv.Version, Kind: "TrainJob"},
			Resource:  metav1.GroupVersionResource{Group: gv.Group, Version: gv.Version, Resource: "trainjobs"},
			Operation: admissionv1.Create,
			Namespace: tj.Namespace,
			Name:      tj.Name,
			Object:    runtime.RawExtension{Raw: raw},
		},
	}
	body, err := json.Marshal(review)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(cluster.Env.WebhookInstallOptions.LocalServingCAData))
	httpClient := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	resp, err := httpClient.Post("https://"+addr+"/validate-trainer-kubeflow-org-v1alpha1-trainjob", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	answer := admissionv1.AdmissionReview{}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&answer))
	require.NotNil(t, answer.Response)
	return answer.Response
}
