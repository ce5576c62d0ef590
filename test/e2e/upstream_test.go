package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/test/testenv"
)

// upstreamSpecs is how many specs upstream's e2e suite has at the version make upstream-e2e
// builds (hack/tools.mk's UPSTREAM_E2E_VERSION, v2.3.0): its ten, and its runtime-update table's two
// entries (a ClusterTrainingRuntime and a TrainingRuntime).
const upstreamSpecs = 12

// TestUpstreamsOwnE2ESuite runs upstream Kubeflow Trainer's own e2e suite, its test/e2e package
// compiled unmodified (bin/upstream-e2e.test, make upstream-e2e), against this cluster, the
// operator and its shipped runtimes, as upstream runs it against kind: every spec passes.
//
// Upstream's pods run in kind, where every container runs for real. Here KWOK's pods run as
// long as their command only sleeps (its deadline spec's `sleep 600`), and the one spec whose
// trainer must really run, `python3 -c` reporting to the status server, runs on the real node:
// the image of upstream's torch runtime is there, as kind loads images, named so but being
// Debian's Python 3 (testenv.MPIImage), and a MutatingAdmissionPolicy, for this test only, sends
// the pods that run python3 in it there (kind would run them on any node).
func TestUpstreamsOwnE2ESuite(t *testing.T) {
	assets, err := testenv.AssetsDir()
	require.NoError(t, err)
	binary := filepath.Join(assets, "upstream-e2e.test")
	if _, err := os.Stat(binary); err != nil {
		t.Fatalf("upstream's e2e suite is not built (make upstream-e2e, which make test-e2e runs): %v", err)
	}
	// The image of the shipped torch-distributed runtime, upstream's: its status-server spec runs
	// `python3 -c` in it. containerd knows an image by its whole name, a pod by what it says.
	torch := &trainer.ClusterTrainingRuntime{}
	require.NoError(t, k8sClient.Get(context.Background(), client.ObjectKey{Name: "torch-distributed"}, torch))
	image := torch.Spec.Template.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.Containers[0].Image
	require.NoError(t, cluster.TagRealNodeImage(testenv.MPIImage, "docker.io/"+image))
	pythonOnTheRealNode(t, image)
	kubeconfig, err := cluster.Kubeconfig("upstream-e2e")
	require.NoError(t, err)

	report := filepath.Join(t.TempDir(), "report.json")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "-ginkgo.v", "-ginkgo.no-color", "-ginkgo.json-report="+report,
		"-ginkgo.timeout=14m", "-test.timeout=15m")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Logf("upstream's e2e suite:\n%s", out)
	}
	require.NoError(t, err, "upstream's e2e suite failed")

	data, err := os.ReadFile(report)
	require.NoError(t, err)
	var suites []struct {
		SpecReports []struct {
			LeafNodeType string
			LeafNodeText string
			State        string
		}
	}
	require.NoError(t, json.Unmarshal(data, &suites))
	require.Len(t, suites, 1)
	var passed []string
	for _, spec := range suites[0].SpecReports {
		if spec.LeafNodeType != "It" && spec.LeafNodeType != "Entry" {
			continue // BeforeSuite and the like
		}
		assert.Equal(t, "passed", spec.State, "upstream's spec %q", spec.LeafNodeText)
		if spec.State == "passed" {
			passed = append(passed, spec.LeafNodeText)
		}
	}
	assert.Len(t, passed, upstreamSpecs, "upstream's specs that passed:\n%s", strings.Join(passed, "\n"))
}

// pythonOnTheRealNode sends the pods whose first container runs python3 in upstream's torch image
// to the real node, until the test ends (other runtimes' python3, JAX's, runs in images the real
// node does not have, on KWOK's nodes): a MutatingAdmissionPolicy (GA in Kubernetes 1.36) gives them its node selector
// and toleration.
func pythonOnTheRealNode(t *testing.T, image string) {
	ctx := context.Background()
	const name = "python-on-the-real-node"
	policy := &admissionregistrationv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
						Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
					},
				}},
			},
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name: "runs-python-in-the-torch-image",
				Expression: `object.spec.containers[0].image == "` + image + `" &&
					has(object.spec.containers[0].command) && size(object.spec.containers[0].command) > 0 &&
					object.spec.containers[0].command[0] == "python3"`,
			}},
			FailurePolicy:      ptr.To(admissionregistrationv1.Fail),
			ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
			Mutations: []admissionregistrationv1.Mutation{{
				PatchType: admissionregistrationv1.PatchTypeJSONPatch,
				JSONPatch: &admissionregistrationv1.JSONPatch{Expression: strings.NewReplacer(
					"$LABEL", testenv.NodeLabel, "$VALUE", testenv.RealNodeLabel, "$TAINT", testenv.RealNodeTaint).Replace(`
					(has(object.spec.nodeSelector) ?
						[JSONPatch{op: "add", path: "/spec/nodeSelector/$LABEL", value: "$VALUE"}] :
						[JSONPatch{op: "add", path: "/spec/nodeSelector", value: {"$LABEL": "$VALUE"}}]) +
					(has(object.spec.tolerations) ?
						[JSONPatch{op: "add", path: "/spec/tolerations/-",
							value: Object.spec.tolerations{key: "$TAINT", operator: "Exists", effect: "NoSchedule"}}] :
						[JSONPatch{op: "add", path: "/spec/tolerations",
							value: [Object.spec.tolerations{key: "$TAINT", operator: "Exists", effect: "NoSchedule"}]}])`)},
			}},
		},
	}
	binding := &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: name},
	}
	for _, obj := range []client.Object{policy, binding} {
		require.NoError(t, k8sClient.Create(ctx, obj))
		t.Cleanup(func() { assert.NoError(t, k8sClient.Delete(ctx, obj)) })
	}
	// The API server applies a policy once it has read it: until a pod made in a dry run shows it.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "python", Namespace: metav1.NamespaceDefault},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "python", Image: image, Command: []string{"python3"}}}},
		}
		require.NoError(c, k8sClient.Create(ctx, pod, client.DryRunAll))
		assert.Equal(c, testenv.RealNodeLabel, pod.Spec.NodeSelector[testenv.NodeLabel])
		assert.Contains(c, pod.Spec.Tolerations, testenv.RealNodeToleration())
	}, timeout, interval, "the policy that sends python3 to the real node is not applied")
}
