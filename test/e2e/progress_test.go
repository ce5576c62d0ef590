package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/progress"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/internal/trainingruntime"
	"github.com/trainjob/operator/test/testenv"
)

// token asks the API server for a token of the namespace's default service account, for an
// audience, as the kubelet does for a pod's projected volume.
func token(t *testing.T, ns, audience string) string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cluster.Env.Config)
	require.NoError(t, err)
	var tr *authenticationv1.TokenRequest
	require.EventuallyWithT(t, func(c *assert.CollectT) { // The default service account is made a moment after its namespace.
		tr, err = cs.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), "default", &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: ptr.To[int64](600)},
		}, metav1.CreateOptions{})
		assert.NoError(c, err)
	}, timeout, interval)
	return tr.Status.Token
}

// reporter posts reports as a trainer would, trusting the CA its pods are given.
type reporter struct {
	client *http.Client
	url    string
}

func (r reporter) post(t *testing.T, token, body string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, r.url, strings.NewReader(body))
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := r.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	return resp.StatusCode
}

// trainerOf is what the TrainJob's trainer reports with: a reporter to the endpoint that trusts
// the CA its pods are given (their annotation, projected into ca.crt), and a token of the
// TrainJob's audience.
func trainerOf(t *testing.T, tj *trainer.TrainJob) (reporter, string) {
	t.Helper()
	js := &jobsetv1alpha2.JobSet{}
	require.NoError(t, k8sClient.Get(context.Background(), client.ObjectKeyFromObject(tj), js))
	roots := x509.NewCertPool()
	ca := js.Spec.ReplicatedJobs[0].Template.Spec.Template.Annotations[progress.CAAnnotation]
	require.True(t, roots.AppendCertsFromPEM([]byte(ca)), "the trainer's pods hold no CA")
	return reporter{
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}},
		url:    cluster.WebhookURL() + progress.Path(tj.Namespace, tj.Name),
	}, token(t, tj.Namespace, progress.Audience(tj.Namespace, tj.Name))
}

func report(percent int) string {
	return fmt.Sprintf(`{"trainerStatus":{"progressPercentage":%d,"estimatedRemainingSeconds":%d,"metrics":[{"name":"loss","value":"0.%d"}]}}`,
		percent, 100-percent, percent)
}

// TestProgressReports wires a TrainJob's trainer to the progress endpoint and reports as the
// trainer would: with its token a report reaches status.trainerStatus; without it, with
// another TrainJob's or another namespace's token, or with a report that is not one, nothing
// changes; a burst of reports is written at most twice, the latest last.
func TestProgressReports(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	createRuntime(t, ns, "plain", utiltesting.MakeRuntimeSpec().ReplicatedJobs(nodeJob("100m")).Obj())
	tj := runningTrainJob(t, ns, "reporting", "plain")

	// The wiring: env vars, the projected token of the TrainJob's audience, the CA.
	js := &jobsetv1alpha2.JobSet{}
	require.NoError(t, k8sClient.Get(ctx, client.ObjectKeyFromObject(tj), js))
	pod := js.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec
	env := map[string]string{}
	for _, e := range pod.Containers[0].Env {
		env[e.Name] = e.Value
	}
	url := cluster.WebhookURL() + progress.Path(ns, tj.Name)
	assert.Equal(t, map[string]string{
		progress.URLEnv: url, progress.CACertEnv: progress.MountPath + "/ca.crt", progress.TokenEnv: progress.MountPath + "/token",
	}, env)
	var projected *corev1.ProjectedVolumeSource
	for _, v := range pod.Volumes {
		if v.Name == progress.Volume {
			projected = v.Projected
		}
	}
	require.NotNil(t, projected, "no %s volume in %v", progress.Volume, pod.Volumes)
	assert.Equal(t, progress.Audience(ns, tj.Name), projected.Sources[0].ServiceAccountToken.Audience)
	assert.Contains(t, projected.Sources, corev1.VolumeProjection{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{
		Path: "ca.crt", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.annotations['" + progress.CAAnnotation + "']"},
	}}}})
	// The CA costs no object of the TrainJob's own: its children are the JobSet and the runtime
	// snapshot.
	cms := &corev1.ConfigMapList{}
	require.NoError(t, k8sClient.List(ctx, cms, client.InNamespace(ns), client.MatchingLabels{trainer.TrainJobNameLabel: tj.Name}))
	var names []string
	for _, cm := range cms.Items {
		names = append(names, cm.Name)
	}
	assert.Equal(t, []string{trainingruntime.SnapshotName(tj.Name)}, names)
	trainerSide, good := trainerOf(t, tj)
	require.Equal(t, url, trainerSide.url)

	require.Equal(t, http.StatusOK, trainerSide.post(t, good, report(10)))
	progressIs := func(percent int32) func(c *assert.CollectT, tj *trainer.TrainJob) {
		return func(c *assert.CollectT, tj *trainer.TrainJob) {
			if assert.NotNil(c, tj.Status.TrainerStatus) {
				assert.Equal(c, ptr.To(percent), tj.Status.TrainerStatus.ProgressPercentage)
				assert.Equal(c, []trainer.Metric{{Name: "loss", Value: fmt.Sprintf("0.%d", percent)}}, tj.Status.TrainerStatus.Metrics)
				assert.False(c, tj.Status.TrainerStatus.LastUpdatedTime.IsZero())
			}
		}
	}
	waitForTrainJob(t, tj, progressIs(10))

	otherNS := newNamespace(t)
	refused := map[string]struct {
		token, body string
		code        int
	}{
		"no token":                     {"", report(50), http.StatusUnauthorized},
		"a made-up token":              {"not-a-token", report(50), http.StatusUnauthorized},
		"another TrainJob's token":     {token(t, ns, progress.Audience(ns, "other")), report(50), http.StatusUnauthorized},
		"a token of another namespace": {token(t, otherNS, progress.Audience(ns, tj.Name)), report(50), http.StatusUnauthorized},
		"a token for the API server":   {token(t, ns, "https://kubernetes.default.svc"), report(50), http.StatusUnauthorized},
		"not JSON":                     {good, "progress: 50", http.StatusUnprocessableEntity},
		"a percentage over 100":        {good, report(101), http.StatusUnprocessableEntity},
		"a metric without a name":      {good, `{"trainerStatus":{"metrics":[{"value":"1"}]}}`, http.StatusUnprocessableEntity},
		"a string for a number":        {good, `{"trainerStatus":{"progressPercentage":"50"}}`, http.StatusUnprocessableEntity},
		"two reports in one body":      {good, report(50) + report(60), http.StatusUnprocessableEntity},
		"a body over 64 KiB":           {good, `{"trainerStatus":{"metrics":[` + strings.Repeat(`{"name":"a","value":"b"},`, 3000) + `]}}`, http.StatusRequestEntityTooLarge},
	}
	for name, tc := range refused {
		assert.Equal(t, tc.code, trainerSide.post(t, tc.token, tc.body), name)
	}
	gone := reporter{client: trainerSide.client, url: cluster.WebhookURL() + progress.Path(ns, "gone")}
	assert.Equal(t, http.StatusNotFound, gone.post(t, token(t, ns, progress.Audience(ns, "gone")), report(50)), "a TrainJob that does not exist")
	time.Sleep(2 * testenv.ProgressInterval) // Long enough for a report that got through to be written.
	assert.Equal(t, ptr.To[int32](10), current(t, tj).Status.TrainerStatus.ProgressPercentage, "a refused report changed the TrainJob")

	// A burst: written at once, then the latest when the interval has passed.
	watcher, err := client.NewWithWatch(cluster.Env.Config, client.Options{Scheme: testenv.Scheme})
	require.NoError(t, err)
	w, err := watcher.Watch(ctx, &trainer.TrainJobList{}, client.InNamespace(ns),
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: current(t, tj).ResourceVersion}})
	require.NoError(t, err)
	defer w.Stop()
	for p := 11; p <= 30; p++ {
		require.Equal(t, http.StatusOK, trainerSide.post(t, good, report(p)))
	}
	var written []int32
	deadline := time.After(timeout)
	for len(written) == 0 || written[len(written)-1] != 30 {
		select {
		case e := <-w.ResultChan():
			got, ok := e.Object.(*trainer.TrainJob)
			if !ok || got.Status.TrainerStatus == nil {
				continue
			}
			if p := *got.Status.TrainerStatus.ProgressPercentage; len(written) == 0 || written[len(written)-1] != p {
				written = append(written, p)
			}
		case <-deadline:
			t.Fatalf("the last report of the burst was not written; written: %v", written)
		}
	}
	assert.LessOrEqual(t, len(written), 2, "a burst of 20 reports within the interval was written as %v", written)
}
