package webhook

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
)

// hostile is a TrainJob written to hurt: refused with every fragment of want, or, with no want,
// admitted and handled: its TrainJob gets its JobSet, which check looks at.
type hostile struct {
	name  string
	obj   *trainer.TrainJob
	want  []string
	check func(*assert.CollectT, *jobsetv1alpha2.JobSet)
}

// TestHostileTrainJobs sends TrainJobs with unicode where names go, megabyte strings, lists of
// thousands, deep nesting and conflicting settings: each is refused at admission naming the
// field and the reason, or admitted and built, and the manager settles: no reconcile loops.
// TestInvalidObjectsAreRejected here and in test/integration/api hold the plainer bad objects.
func TestHostileTrainJobs(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	mib := strings.Repeat("x", 1<<20)
	tj := func(name string, change func(*trainer.TrainJob)) *trainer.TrainJob {
		o := utiltesting.MakeTrainJob(name, ns).Obj()
		o.Spec.RuntimeRef.Name = "torch-distributed"
		change(o)
		return o
	}
	trainerWith := func(name string, t trainer.Trainer) *trainer.TrainJob {
		return tj(name, func(o *trainer.TrainJob) { o.Spec.Trainer = &t })
	}
	env := func(n int) []corev1.EnvVar {
		vars := make([]corev1.EnvVar, n)
		for i := range vars {
			vars[i] = corev1.EnvVar{Name: fmt.Sprintf("VAR_%d", i), Value: "x"}
		}
		return vars
	}
	nodeEnv := func(vars ...corev1.EnvVar) *trainer.PodSpecPatch {
		return &trainer.PodSpecPatch{Containers: []trainer.ContainerPatch{{Name: "node", Env: vars}}}
	}
	nodeEnvIs := func(name, value string) func(*assert.CollectT, *jobsetv1alpha2.JobSet) {
		return func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
			for _, job := range js.Spec.ReplicatedJobs {
				if job.Name == "node" {
					assert.Contains(c, job.Template.Spec.Template.Spec.Containers[0].Env, corev1.EnvVar{Name: name, Value: value})
				}
			}
		}
	}
	labels := func(n int) map[string]string {
		l := make(map[string]string, n)
		for i := range n {
			l[fmt.Sprintf("team-%d", i)] = "x"
		}
		return l
	}

	cases := []hostile{
		// Unicode where Kubernetes takes ASCII.
		{name: "a unicode TrainJob name", obj: tj("träin", func(*trainer.TrainJob) {}),
			want: []string{`metadata.name: Invalid value: "träin"`}},
		{name: "an emoji in the TrainJob name", obj: tj("job-\U0001F680", func(*trainer.TrainJob) {}),
			want: []string{"metadata.name: Invalid value"}},
		{name: "a unicode env var name", obj: trainerWith("env-unicode", trainer.Trainer{Env: []corev1.EnvVar{{Name: "ÄPFEL", Value: "1"}}}),
			want: []string{`spec.trainer.env[0].name: Invalid value: "ÄPFEL"`, "printable ASCII"}},
		{name: "an env var name with '='", obj: trainerWith("env-equals", trainer.Trainer{Env: []corev1.EnvVar{{Name: "A=B", Value: "1"}}}),
			want: []string{`spec.trainer.env[0].name: Invalid value: "A=B"`}},
		{name: "a unicode env var name in an override", obj: tj("env-override", func(o *trainer.TrainJob) {
			o.Spec.PodSpecOverrides = override(trainer.PodSpecOverride{PodSpecPatch: *nodeEnv(corev1.EnvVar{Name: "ÜBER", Value: "1"})})
		}), want: []string{`spec.podSpecOverrides[0].containers[0].env[0].name: Invalid value: "ÜBER"`}},
		{name: "a unicode label key", obj: tj("label-unicode", func(o *trainer.TrainJob) { o.Spec.Labels = map[string]string{"ä/b": "c"} }),
			want: []string{`spec.labels: Invalid value: "ä/b"`}},
		{name: "a label value with a space, in a runtime patch", obj: tj("label-patch", func(o *trainer.TrainJob) {
			o.Spec.RuntimePatches = []trainer.RuntimePatch{utiltesting.JobPatch("kueue.x-k8s.io/manager",
				utiltesting.PodPatch("node", &trainer.MetadataPatch{Labels: map[string]string{"zone": "a b"}}, nil))}
		}), want: []string{`spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.metadata.labels: Invalid value: "a b"`}},

		// The operator's own keys: joining another gang, or another team's KAI queue.
		{name: "a gang label on the TrainJob", obj: tj("gang-label", func(o *trainer.TrainJob) {
			o.Spec.Labels = map[string]string{"scheduling.x-k8s.io/pod-group": "someone-else"}
		}), want: []string{"spec.labels[scheduling.x-k8s.io/pod-group]: Forbidden", "may not be set by hand"}},
		{name: "a Volcano group annotation on the TrainJob", obj: tj("volcano-annotation", func(o *trainer.TrainJob) {
			o.Spec.Annotations = map[string]string{"scheduling.k8s.io/group-name": "someone-else"}
		}), want: []string{"spec.annotations[scheduling.k8s.io/group-name]: Forbidden"}},
		{name: "a KAI queue label in a runtime patch", obj: tj("kai-patch", func(o *trainer.TrainJob) {
			o.Spec.RuntimePatches = []trainer.RuntimePatch{utiltesting.JobPatch("kueue.x-k8s.io/manager",
				utiltesting.PodPatch("node", &trainer.MetadataPatch{Labels: map[string]string{"kai.scheduler/queue": "another-team"}}, nil))}
		}), want: []string{"spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.metadata.labels[kai.scheduler/queue]: Forbidden"}},

		// Megabyte strings.
		{name: "a 1 MiB command, upstream's cap for an item", obj: trainerWith("command-mib", trainer.Trainer{Command: []string{mib}}),
			check: func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
				for _, job := range js.Spec.ReplicatedJobs {
					if job.Name == "node" {
						assert.Equal(c, []string{mib}, job.Template.Spec.Template.Spec.Containers[0].Command)
					}
				}
			}},
		{name: "a command item over 1 MiB", obj: trainerWith("command-over-mib", trainer.Trainer{Command: []string{mib + "x"}}),
			want: []string{"spec.trainer.command[0]: Too long: may not be more than 1048576 bytes"}},
		{name: "a 1 MiB image", obj: trainerWith("image-mib", trainer.Trainer{Image: ptr.To(mib)}),
			want: []string{"spec.trainer.image: Too long: may not be more than 500 bytes"}},
		{name: "a 1 MiB label value", obj: tj("label-mib", func(o *trainer.TrainJob) { o.Spec.Labels = map[string]string{"a": mib} }),
			want: []string{"spec.labels: Invalid value", "must be no more than 63 bytes"}},
		{name: "a 1 MiB annotation", obj: tj("annotation-mib", func(o *trainer.TrainJob) { o.Spec.Annotations = map[string]string{"a": mib} }),
			want: []string{"spec.annotations: Too long", "262144 bytes"}},
		{name: "a 4 MiB TrainJob", obj: trainerWith("command-4mib", trainer.Trainer{Command: []string{mib, mib, mib, mib}}),
			want: []string{"Request entity too large"}},

		// Lists of thousands.
		{name: "10,000 env vars", obj: trainerWith("env-10k", trainer.Trainer{Env: env(10000)}),
			want: []string{"spec.trainer.env: Too many: 10000: must have at most 128 items"}},
		{name: "128 env vars, upstream's cap", obj: trainerWith("env-128", trainer.Trainer{Env: env(128)}),
			check: nodeEnvIs("VAR_127", "x")},
		{name: "1,000 labels", obj: tj("labels-1k", func(o *trainer.TrainJob) { o.Spec.Labels = labels(1000) }),
			check: func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) { assert.Equal(c, "x", js.Labels["team-999"]) }},
		{name: "1,000 pod overrides", obj: tj("overrides-1k", func(o *trainer.TrainJob) {
			for range 1000 {
				o.Spec.PodSpecOverrides = append(o.Spec.PodSpecOverrides, trainer.PodSpecOverride{PodSpecPatch: trainer.PodSpecPatch{ServiceAccountName: ptr.To("a")}})
			}
		}), check: func(c *assert.CollectT, js *jobsetv1alpha2.JobSet) {
			assert.Equal(c, "a", js.Spec.ReplicatedJobs[0].Template.Spec.Template.Spec.ServiceAccountName)
		}},
		{name: "100 runtime patches", obj: tj("patches-100", func(o *trainer.TrainJob) {
			for i := range 100 {
				o.Spec.RuntimePatches = append(o.Spec.RuntimePatches, trainer.RuntimePatch{Manager: fmt.Sprintf("example.com/m%d", i)})
			}
		}), want: []string{"spec.runtimePatches: Too many: 100"}},
		{name: "5,001 nodes", obj: trainerWith("nodes-5001", trainer.Trainer{NumNodes: ptr.To[int32](5001)}),
			want: []string{"spec.trainer.numNodes", "less than or equal to 5000"}},

		// Settings that contradict each other: the documented order decides.
		{name: "an override and a runtime patch setting one env var", obj: tj("override-vs-patch", func(o *trainer.TrainJob) {
			o.Spec.PodSpecOverrides = override(trainer.PodSpecOverride{PodSpecPatch: *nodeEnv(corev1.EnvVar{Name: "MODE", Value: "override"})})
			o.Spec.RuntimePatches = []trainer.RuntimePatch{utiltesting.JobPatch("kueue.x-k8s.io/manager",
				utiltesting.PodPatch("node", nil, nodeEnv(corev1.EnvVar{Name: "MODE", Value: "patch"})))}
		}), check: nodeEnvIs("MODE", "patch")},
		{name: "two overrides setting one env var", obj: tj("override-twice", func(o *trainer.TrainJob) {
			o.Spec.PodSpecOverrides = []trainer.PodSpecOverride{
				{PodSpecPatch: *nodeEnv(corev1.EnvVar{Name: "MODE", Value: "first"})},
				{TargetJobs: []string{"node"}, PodSpecPatch: *nodeEnv(corev1.EnvVar{Name: "MODE", Value: "second"})},
			}
		}), check: nodeEnvIs("MODE", "second")},
		{name: "trainer env and an override setting one env var", obj: tj("trainer-vs-override", func(o *trainer.TrainJob) {
			o.Spec.Trainer = &trainer.Trainer{Env: []corev1.EnvVar{{Name: "MODE", Value: "trainer"}}}
			o.Spec.PodSpecOverrides = override(trainer.PodSpecOverride{PodSpecPatch: *nodeEnv(corev1.EnvVar{Name: "MODE", Value: "override"})})
		}), check: nodeEnvIs("MODE", "override")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := k8sClient.Create(ctx, tc.obj)
			if tc.want != nil {
				require.Error(t, err, "admitted")
				for _, fragment := range tc.want {
					assert.Contains(t, truncate(err.Error()), fragment)
				}
				return
			}
			require.NoError(t, err)
			utiltesting.WaitFor(t, k8sClient, utiltesting.Polling{Timeout: timeout, Interval: interval}, client.ObjectKeyFromObject(tc.obj), &jobsetv1alpha2.JobSet{}, tc.check)
		})
	}

	// Nesting deeper than any decoder should follow: the API server refuses it; a shallower
	// unknown field is dropped, and the TrainJob runs.
	for depth, want := range map[int]string{100: "", 20000: "exceeded max depth"} {
		name := fmt.Sprintf("nested-%d", depth)
		body := fmt.Sprintf(`{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob","metadata":{"name":%q},`+
			`"spec":{"runtimeRef":{"name":"torch-distributed"},"deep":%s1%s}}`, name, strings.Repeat(`{"a":`, depth), strings.Repeat("}", depth))
		clients, err := kubernetes.NewForConfig(restCfg)
		require.NoError(t, err)
		err = clients.RESTClient().Post().AbsPath("/apis/trainer.kubeflow.org/v1alpha1/namespaces", ns, "trainjobs").
			SetHeader("Content-Type", "application/json").Body([]byte(body)).Do(ctx).Error()
		if want != "" {
			require.Error(t, err, "%d levels deep", depth)
			assert.Contains(t, err.Error(), want)
			continue
		}
		require.NoError(t, err, "%d levels deep", depth)
		waitForCreated(t, ns, name)
	}

	// The manager settles: with every admitted TrainJob built, nothing is reconciled again.
	settled := func() float64 {
		m, err := cluster.ScrapeMetrics()
		require.NoError(t, err)
		return m.Value("controller_runtime_reconcile_total", nil)
	}
	before := settled()
	time.Sleep(3 * time.Second)
	assert.LessOrEqual(t, settled()-before, 2.0, "the manager keeps reconciling: a loop")
	t.Logf("%d hostile TrainJobs and 2 nested ones", len(cases))
}

// waitForCreated waits for the TrainJob's JobSet to be made: its state is Created.
func waitForCreated(t *testing.T, ns, name string) {
	t.Helper()
	utiltesting.WaitFor(t, k8sClient, utiltesting.Polling{Timeout: timeout, Interval: interval}, client.ObjectKey{Namespace: ns, Name: name}, &trainer.TrainJob{},
		func(c *assert.CollectT, tj *trainer.TrainJob) {
			assert.Equal(c, trainer.TrainJobCreated, tj.Status.State, "conditions %v", tj.Status.Conditions)
		})
}

// truncate keeps an error message short enough to read: a refused megabyte value is quoted in it.
func truncate(msg string) string {
	const keep = 2000
	if len(msg) <= keep {
		return msg
	}
	return msg[:keep/2] + " ... " + msg[len(msg)-keep/2:]
}
