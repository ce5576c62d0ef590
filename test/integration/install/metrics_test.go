package install

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainjob/operator/internal/metricsauth"
)

// TestMetricsNeedAnAllowedToken serves a metrics endpoint behind the manager's filter, which
// reviews as the manager's service account with the install's RBAC: only a token whose user the
// cluster lets get /metrics (the install's metrics-reader ClusterRole, bound to a scraper) reads
// it; no token or a made-up one is 401, a known user without the grant or another path 403, a
// method other than GET and HEAD 405 before any review; a client that varies the path, each one
// a SubjectAccessReview, is refused with 429 past its budget.
func TestMetricsNeedAnAllowedToken(t *testing.T) {
	ctx := context.Background()
	applyRBAC(t)
	const monitoring = "monitoring"
	require.NoError(t, client.IgnoreAlreadyExists(k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: monitoring}})))
	for _, name := range []string{"prometheus", "nobody"} {
		require.NoError(t, client.IgnoreAlreadyExists(k8sClient.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: monitoring}})))
	}
	require.NoError(t, client.IgnoreAlreadyExists(k8sClient.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus-reads-trainjob-metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "trainjob-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "prometheus", Namespace: monitoring}},
	})))

	manager := rest.AnonymousClientConfig(cluster.Env.Config)
	manager.BearerToken = token(t, namespace, "trainjob-controller-manager")
	httpClient, err := rest.HTTPClientFor(manager)
	require.NoError(t, err)
	filter, err := metricsauth.Filter(manager, httpClient)
	require.NoError(t, err)
	handler, err := filter(logr.Discard(), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "metrics") }))
	require.NoError(t, err)
	server := httptest.NewServer(handler)
	defer server.Close()

	prometheus, nobody := token(t, monitoring, "prometheus"), token(t, monitoring, "nobody")
	cases := []struct {
		name, method, path, authorization string
		code                              int
	}{
		{"the scraper", http.MethodGet, "/metrics", "Bearer " + prometheus, http.StatusOK},
		{"the scraper again, remembered", http.MethodGet, "/metrics", "Bearer " + prometheus, http.StatusOK},
		{"no token", http.MethodGet, "/metrics", "", http.StatusUnauthorized},
		{"a made-up token", http.MethodGet, "/metrics", "Bearer made-up", http.StatusUnauthorized},
		{"not a bearer token", http.MethodGet, "/metrics", "Basic " + prometheus, http.StatusUnauthorized},
		{"a user without the grant", http.MethodGet, "/metrics", "Bearer " + nobody, http.StatusForbidden},
		{"the scraper on another path", http.MethodGet, "/debug/pprof/", "Bearer " + prometheus, http.StatusForbidden},
		{"the scraper with another method", http.MethodPost, "/metrics", "Bearer " + prometheus, http.StatusMethodNotAllowed},
		{"no token, another method", http.MethodDelete, "/metrics", "", http.StatusMethodNotAllowed},
		{"the scraper with HEAD", http.MethodHead, "/metrics", "Bearer " + prometheus, http.StatusForbidden},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(ctx, tc.method, server.URL+tc.path, nil)
			require.NoError(t, err)
			if tc.authorization != "" {
				req.Header.Set("Authorization", tc.authorization)
			}
			resp, err := server.Client().Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			assert.Equal(t, tc.code, resp.StatusCode, "%s", body)
			if tc.code == http.StatusForbidden && tc.method != http.MethodHead {
				assert.Contains(t, string(body), fmt.Sprintf("Authorization denied for user system:serviceaccount:%s:", monitoring))
			}
		})
	}

	// Each new path is a SubjectAccessReview: a client that asks for many is refused past its
	// budget (10 at once, 5 a second), without a review.
	codes := map[int]int{}
	began := time.Now()
	const asked = 60
	for i := range asked {
		codes[get(t, server, fmt.Sprintf("/metrics/%d", i), prometheus)]++
	}
	// At most the burst, and what the budget refilled meanwhile, were reviewed.
	budget := metricsauth.Reviews.ClientBurst + int(metricsauth.Reviews.ClientQPS*time.Since(began).Seconds()) + 1
	assert.Equal(t, asked, codes[http.StatusForbidden]+codes[http.StatusTooManyRequests], "%v", codes)
	assert.LessOrEqual(t, codes[http.StatusForbidden], budget, "%v", codes)
	assert.Positive(t, codes[http.StatusTooManyRequests], "%v", codes)
	assert.Equal(t, http.StatusOK, get(t, server, "/metrics", prometheus), "a decision made is not counted again")
}

// get asks the server for path with a bearer token, and returns the answer's status.
func get(t *testing.T, server *httptest.Server, path, token string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, server.URL+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := server.Client().Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// token is a new token of a service account, as the kubelet gives its pods.
func token(t *testing.T, namespace, name string) string {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
	req := &authenticationv1.TokenRequest{}
	require.NoError(t, k8sClient.SubResource("token").Create(context.Background(), sa, req))
	require.NotEmpty(t, req.Status.Token)
	return req.Status.Token
}
