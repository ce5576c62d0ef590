// Package helm checks the Helm chart (charts/trainjob-operator) against the kustomize install it
// stands beside: `helm template` with default values renders the objects of
// `kustomize build config/default`, with webhook.certManager.enabled those of
// config/default-certmanager, with runtimes.enabled those of config/runtimes too; each value
// reaches the field it is for; and the chart's copies of what config/ generates are current.
// It runs bin/helm (`make helm`) and needs no cluster.
package helm

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/trainjob/operator/test/testenv"
)

// namespace is the kustomize install's.
const namespace = "trainjob-system"

// helmLabels are the labels the chart adds to every object it renders, beside the install's own.
var helmLabels = []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version"}

func TestDefaultValuesRenderTheKustomizeInstall(t *testing.T) {
	assertSameObjects(t, withoutNamespace(t, kustomize(t, "default")), render(t, namespace))
}

func TestCertManagerRendersTheCertManagerInstall(t *testing.T) {
	assertSameObjects(t, withoutNamespace(t, kustomize(t, "default-certmanager")),
		render(t, namespace, "--set", "webhook.certManager.enabled=true"))
}

func TestRuntimesRenderTheShippedRuntimes(t *testing.T) {
	without := keys(render(t, namespace))
	var runtimes []*unstructured.Unstructured
	for _, obj := range render(t, namespace, "--set", "runtimes.enabled=true") {
		if !without[key(obj)] {
			runtimes = append(runtimes, obj)
		}
	}
	assertSameObjects(t, kustomize(t, "runtimes"), runtimes)
}

// TestValues renders the chart with each value set, and checks the objects it is for.
// TestHistoryRendersTheHistoryInstall: history.enabled renders config/history, the operator and
// its history; but for the volume of the runs, which the chart keeps when its release goes.
func TestHistoryRendersTheHistoryInstall(t *testing.T) {
	got := render(t, namespace, "--set", "history.enabled=true")
	pvc := find(t, got, "PersistentVolumeClaim", "trainjob-history")
	assert.Equal(t, map[string]string{"helm.sh/resource-policy": "keep"}, pvc.GetAnnotations())
	unstructured.RemoveNestedField(pvc.Object, "metadata", "annotations")
	assertSameObjects(t, withoutNamespace(t, kustomize(t, "history")), got)
}

func TestValues(t *testing.T) {
	cases := map[string]struct {
		namespace string
		flags     []string // of helm template
		check     func(t *testing.T, objs []*unstructured.Unstructured)
	}{
		"an image from a registry, pulled when missing": {
			flags: sets("image.repository=registry.example.com/ml/trainjob-operator", "image.tag=v0.2.0", "image.pullPolicy=IfNotPresent"),
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				c := container(t, objs)
				assert.Equal(t, "registry.example.com/ml/trainjob-operator:v0.2.0", c.Image)
				assert.Equal(t, corev1.PullIfNotPresent, c.ImagePullPolicy)
			},
		},
		"three replicas elect a leader": {
			flags: sets("replicas=3"),
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				assert.Equal(t, ptr.To[int32](3), deployment(t, objs).Spec.Replicas)
				assert.Contains(t, container(t, objs).Args, "--leader-elect")
			},
		},
		"one replica without leader election has no Lease to take": {
			flags: sets("leaderElection.enabled=false"),
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				assert.NotContains(t, container(t, objs).Args, "--leader-elect")
				assert.Nil(t, lookup(objs, "Role", "trainjob-leader-election-role"))
				assert.Nil(t, lookup(objs, "RoleBinding", "trainjob-leader-election-rolebinding"))
			},
		},
		"the manager's flags, in order, extra ones last": {
			flags: sets("manager.conditions=all", "manager.trainjobConcurrency=32", "manager.kubeAPIQPS=1000",
				"manager.kubeAPIBurst=2000", "manager.runtimeGracePeriod=30s", "manager.extraArgs={--zap-log-level=debug}"),
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				assert.Equal(t, []string{"--leader-elect", "--health-probe-bind-address=:8081", "--metrics-bind-address=:8443",
					"--conditions=all", "--trainjob-concurrency=32", "--kube-api-qps=1000", "--kube-api-burst=2000",
					"--runtime-grace-period=30s", "--zap-log-level=debug"}, container(t, objs).Args)
			},
		},
		"numbers from a values file print whole, fractions as they are": {
			flags: []string{"--set-json", `manager={"trainjobConcurrency":2000000,"kubeAPIBurst":1000000,"kubeAPIQPS":1000000}`},
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				assert.Subset(t, container(t, objs).Args, []string{"--trainjob-concurrency=2000000", "--kube-api-burst=1000000", "--kube-api-qps=1000000"})
			},
		},
		"a fraction of a query per second": {
			flags: sets("manager.kubeAPIQPS=2.5"),
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				assert.Contains(t, container(t, objs).Args, "--kube-api-qps=2.5")
			},
		},
		"resources replace the install's, key by key": {
			flags: sets("resources.limits.memory=4Gi"),
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				assert.Equal(t, corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("320Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")},
				}, container(t, objs).Resources)
			},
		},
		"metrics off: no endpoint, Service or metrics RBAC": {
			flags: sets("metrics.enabled=false"),
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				c := container(t, objs)
				assert.NotContains(t, strings.Join(c.Args, " "), "--metrics-bind-address")
				assert.NotContains(t, fmt.Sprint(c.Ports), "metrics")
				assert.Nil(t, lookup(objs, "Service", "trainjob-controller-manager-metrics-service"))
				assert.Nil(t, lookup(objs, "ClusterRole", "trainjob-metrics-reader"))
				assert.Nil(t, lookup(objs, "ClusterRole", "trainjob-metrics-auth-role"))
				assert.Nil(t, lookup(objs, "ClusterRoleBinding", "trainjob-metrics-auth-rolebinding"))
			},
		},
		"metrics on another port": {
			flags: sets("metrics.port=9090"),
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				c := container(t, objs)
				assert.Contains(t, c.Args, "--metrics-bind-address=:9090")
				assert.Contains(t, c.Ports, corev1.ContainerPort{Name: "metrics", ContainerPort: 9090, Protocol: corev1.ProtocolTCP})
				service := &corev1.Service{}
				convert(t, find(t, objs, "Service", "trainjob-controller-manager-metrics-service"), service)
				assert.Equal(t, []corev1.ServicePort{{Name: "https", Port: 9090, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("metrics")}}, service.Spec.Ports)
			},
		},
		"cert-manager with an issuer of the cluster's": {
			flags: sets("webhook.certManager.enabled=true", "webhook.certManager.issuerRef.kind=ClusterIssuer", "webhook.certManager.issuerRef.name=company-ca"),
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				assert.Nil(t, lookup(objs, "Issuer", "trainjob-selfsigned-issuer"))
				ref, _, _ := unstructured.NestedMap(find(t, objs, "Certificate", "trainjob-serving-cert").Object, "spec", "issuerRef")
				assert.Equal(t, map[string]any{"kind": "ClusterIssuer", "name": "company-ca"}, ref)
			},
		},
		"another namespace: every namespaced object, reference and DNS name follows": {
			namespace: "ml-platform",
			flags:     sets("webhook.certManager.enabled=true"),
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				text := dump(t, objs)
				assert.NotContains(t, text, namespace)
				for _, obj := range objs {
					if obj.GetKind() != "CustomResourceDefinition" && !strings.HasPrefix(obj.GetKind(), "Cluster") && !strings.HasSuffix(obj.GetKind(), "WebhookConfiguration") {
						assert.Equal(t, "ml-platform", obj.GetNamespace(), "%s %s", obj.GetKind(), obj.GetName())
					}
				}
				for _, obj := range objs {
					switch obj.GetKind() {
					case "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration":
						assert.Equal(t, "ml-platform/trainjob-serving-cert", obj.GetAnnotations()["cert-manager.io/inject-ca-from"])
						webhooks, _, _ := unstructured.NestedSlice(obj.Object, "webhooks")
						for _, w := range webhooks {
							service, _, _ := unstructured.NestedStringMap(w.(map[string]any), "clientConfig", "service")
							assert.Equal(t, "ml-platform", service["namespace"], "%s %s", obj.GetName(), service["path"])
							assert.Equal(t, "trainjob-webhook-service", service["name"])
						}
					case "ClusterRoleBinding", "RoleBinding":
						subjects, _, _ := unstructured.NestedSlice(obj.Object, "subjects")
						for _, subject := range subjects {
							if subject := subject.(map[string]any); subject["kind"] == "ServiceAccount" {
								assert.Equal(t, "ml-platform", subject["namespace"], obj.GetName())
							}
						}
					case "Certificate":
						names, _, _ := unstructured.NestedStringSlice(obj.Object, "spec", "dnsNames")
						assert.Equal(t, []string{"trainjob-webhook-service.ml-platform.svc", "trainjob-webhook-service.ml-platform.svc.cluster.local"}, names)
					}
				}
			},
		},
		"scheduling of the manager's pods": {
			flags: sets("nodeSelector.pool=system", "tolerations[0].key=dedicated", "tolerations[0].operator=Exists",
				"priorityClassName=system-cluster-critical", "podAnnotations.team=ml", "imagePullSecrets[0].name=regcred"),
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				pod := deployment(t, objs).Spec.Template
				assert.Equal(t, map[string]string{"pool": "system"}, pod.Spec.NodeSelector)
				assert.Equal(t, []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}, pod.Spec.Tolerations)
				assert.Equal(t, "system-cluster-critical", pod.Spec.PriorityClassName)
				assert.Equal(t, []corev1.LocalObjectReference{{Name: "regcred"}}, pod.Spec.ImagePullSecrets)
				assert.Equal(t, map[string]string{"kubectl.kubernetes.io/default-container": "manager", "team": "ml"}, pod.Annotations)
			},
		},
		"the history on PostgreSQL, two replicas, no volume": {
			flags: sets("history.enabled=true", "history.replicas=2", "history.database.secretName=history-db", "history.retentionMaxAge=720h",
				"history.retentionMaxRuns=50000"),
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				assert.Nil(t, lookup(objs, "PersistentVolumeClaim", "trainjob-history"))
				d := &appsv1.Deployment{}
				convert(t, find(t, objs, "Deployment", "trainjob-history"), d)
				assert.Equal(t, ptr.To[int32](2), d.Spec.Replicas)
				assert.Empty(t, d.Spec.Strategy.Type, "Recreate is for SQLite's volume")
				c := d.Spec.Template.Spec.Containers[0]
				assert.Equal(t, []string{"--leader-elect", "--health-probe-bind-address=:8081", "--secure-port=8443", "--metrics-bind-address=:8444",
					"--retention-max-age=720h", "--retention-max-runs=50000"}, c.Args)
				assert.Contains(t, c.Env, corev1.EnvVar{Name: "TRAINJOB_HISTORY_DATABASE", ValueFrom: &corev1.EnvVarSource{
					SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "history-db"}, Key: "url"}}})
				assert.Equal(t, "POD_NAMESPACE", c.Env[0].Name)
				assert.Len(t, d.Spec.Template.Spec.Volumes, 1, "the serving certificate's alone")
				assert.Contains(t, container(t, objs).Args, "--history")
			},
		},
		"the history in a namespace of its release": {
			namespace: "ml-platform",
			flags:     sets("history.enabled=true"),
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				api := find(t, objs, "APIService", "v1alpha1.history.trainer.kubeflow.org")
				ns, _, _ := unstructured.NestedString(api.Object, "spec", "service", "namespace")
				assert.Equal(t, "ml-platform", ns)
				assert.Equal(t, "kube-system", find(t, objs, "RoleBinding", "trainjob-history-auth-reader").GetNamespace())
				assert.NotContains(t, dump(t, objs), "trainjob-system")
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ns := tc.namespace
			if ns == "" {
				ns = namespace
			}
			tc.check(t, render(t, ns, tc.flags...))
		})
	}
}

// TestRefusedValues checks that helm refuses values that would install a broken operator, or
// that name nothing, saying why.
func TestRefusedValues(t *testing.T) {
	cases := map[string]struct {
		set  []string
		want string
	}{
		"replicas without leader election": {
			set:  []string{"replicas=2", "leaderElection.enabled=false"},
			want: "replicas above 1 need leaderElection.enabled",
		},
		"a history of two replicas on SQLite": {
			set:  []string{"history.enabled=true", "history.replicas=2"},
			want: "history.replicas above 1 need PostgreSQL",
		},
		"a misspelt value":           {set: []string{"replica=2"}, want: "additional properties 'replica' not allowed"},
		"an unknown conditions mode": {set: []string{"manager.conditions=most"}, want: "/manager/conditions"},
		"a rate that is no number":   {set: []string{"manager.kubeAPIQPS=fast"}, want: "/manager/kubeAPIQPS"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := testenv.HelmTemplate(context.Background(), namespace, sets(tc.set...)...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestLint runs `helm lint --strict`, which reads the chart as helm's maintainers would have it.
func TestLint(t *testing.T) {
	chart, err := testenv.ChartDir()
	require.NoError(t, err)
	for _, values := range [][]string{nil, {"--set", "webhook.certManager.enabled=true", "--set", "runtimes.enabled=true", "--set", "history.enabled=true"}} {
		out, err := testenv.Helm(context.Background(), append([]string{"lint", "--strict", chart}, values...)...)
		require.NoError(t, err, "%s", out)
	}
}

// TestChartCopiesAreCurrent checks the chart's copies of what config/ generates or ships (the
// Makefile's chart-files target, run by make manifests) against their sources, file by file.
func TestChartCopiesAreCurrent(t *testing.T) {
	chart, err := testenv.ChartDir()
	require.NoError(t, err)
	config := filepath.Join(chart, "..", "..", "config")
	for copies, sources := range map[string]string{
		"crds":           "crd/bases",
		"files/rbac":     "rbac/role.yaml",
		"files/history":  "history/rbac/role.yaml",
		"files/webhook":  "webhook/manifests.yaml",
		"files/runtimes": "runtimes",
	} {
		want := yamlFiles(t, filepath.Join(config, sources))
		got := yamlFiles(t, filepath.Join(chart, copies))
		assert.Equal(t, slices.Sorted(maps.Keys(want)), slices.Sorted(maps.Keys(got)),
			"%s/ holds other files than config/%s: run make manifests", copies, sources)
		for name, data := range want {
			assert.True(t, bytes.Equal(data, got[name]), "%s/%s differs from config/%s: run make manifests", copies, name, sources)
		}
	}
}

// sets are helm's --set flags for values such as "replicas=2".
func sets(values ...string) []string {
	var flags []string
	for _, v := range values {
		flags = append(flags, "--set", v)
	}
	return flags
}

// yamlFiles reads a YAML file, or the YAML files of a folder but a kustomization, by name.
func yamlFiles(t *testing.T, path string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	paths := []string{path}
	if info, err := os.Stat(path); err == nil && info.IsDir() {
		paths, err = filepath.Glob(filepath.Join(path, "*.yaml"))
		require.NoError(t, err)
	}
	for _, p := range paths {
		if filepath.Base(p) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(p)
		require.NoError(t, err)
		files[filepath.Base(p)] = data
	}
	return files
}

// render is `helm template` of the chart into namespace, with the helm labels taken off.
func render(t *testing.T, namespace string, flags ...string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := testenv.HelmTemplate(context.Background(), namespace, flags...)
	require.NoError(t, err)
	for _, obj := range objs {
		labels := obj.GetLabels()
		for _, l := range helmLabels {
			delete(labels, l)
		}
		if len(labels) == 0 {
			unstructured.RemoveNestedField(obj.Object, "metadata", "labels")
		} else {
			obj.SetLabels(labels)
		}
	}
	return objs
}

func kustomize(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := testenv.Kustomize(filepath.Join("..", "..", "config", dir))
	require.NoError(t, err)
	return objs
}

// withoutNamespace drops the kustomize install's Namespace: helm installs into a namespace that
// exists (helm install --create-namespace, or one made beforehand with the Pod Security label),
// and a chart cannot create the namespace its own release is stored in.
func withoutNamespace(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	t.Helper()
	var rest []*unstructured.Unstructured
	var dropped []string
	for _, obj := range objs {
		if obj.GetKind() == "Namespace" {
			dropped = append(dropped, obj.GetName())
			continue
		}
		rest = append(rest, obj)
	}
	require.Equal(t, []string{namespace}, dropped)
	return rest
}

// assertSameObjects compares two sets of objects by kind, namespace and name, then field by field.
func assertSameObjects(t *testing.T, want, got []*unstructured.Unstructured) {
	t.Helper()
	wantByKey, gotByKey := map[string]*unstructured.Unstructured{}, map[string]*unstructured.Unstructured{}
	for _, obj := range want {
		wantByKey[key(obj)] = obj
	}
	for _, obj := range got {
		require.NotContains(t, gotByKey, key(obj), "the chart renders %s twice", key(obj))
		gotByKey[key(obj)] = obj
	}
	assert.Equal(t, slices.Sorted(maps.Keys(wantByKey)), slices.Sorted(maps.Keys(gotByKey)), "the objects differ")
	for k, w := range wantByKey {
		if g, ok := gotByKey[k]; ok {
			assert.Empty(t, cmp.Diff(w.Object, g.Object), "%s differs (-kustomize +helm)", k)
		}
	}
}

func key(obj *unstructured.Unstructured) string {
	return fmt.Sprintf("%s %s/%s", obj.GroupVersionKind().GroupKind(), obj.GetNamespace(), obj.GetName())
}

func keys(objs []*unstructured.Unstructured) map[string]bool {
	m := map[string]bool{}
	for _, obj := range objs {
		m[key(obj)] = true
	}
	return m
}

func lookup(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, obj := range objs {
		if obj.GetKind() == kind && obj.GetName() == name {
			return obj
		}
	}
	return nil
}

func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	obj := lookup(objs, kind, name)
	require.NotNil(t, obj, "no %s %s rendered", kind, name)
	return obj
}

// deployment is the manager's Deployment.
func deployment(t *testing.T, objs []*unstructured.Unstructured) *appsv1.Deployment {
	t.Helper()
	d := &appsv1.Deployment{}
	convert(t, find(t, objs, "Deployment", "trainjob-controller-manager"), d)
	return d
}

// container is the manager's container.
func container(t *testing.T, objs []*unstructured.Unstructured) corev1.Container {
	t.Helper()
	containers := deployment(t, objs).Spec.Template.Spec.Containers
	require.Len(t, containers, 1)
	return containers[0]
}

func convert(t *testing.T, obj *unstructured.Unstructured, into any) {
	t.Helper()
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, into))
}

// dump is the objects as YAML, for looking for a text anywhere in them.
func dump(t *testing.T, objs []*unstructured.Unstructured) string {
	t.Helper()
	var b strings.Builder
	for _, obj := range objs {
		data, err := yaml.Marshal(obj.Object)
		require.NoError(t, err)
		b.Write(data)
		b.WriteString("---\n")
	}
	return b.String()
}
