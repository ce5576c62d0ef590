package controller

import (
	"os"
	"strings"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	schedulerpluginsv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
	"github.com/trainjob/operator/internal/trainingruntime"
)

// summaryKey is the annotation a summary (framework.Summarize) holds its hashes in: the one the
// cache added.
func summaryKey(t *testing.T, summary *trainer.TrainJob) string {
	t.Helper()
	for k := range summary.Annotations {
		if strings.HasSuffix(k, "/cached-summary") {
			return k
		}
	}
	t.Fatal("no summary annotation")
	return ""
}

// testdataObjects returns a function that decodes a file of testdata anew at each call, as a
// watch decodes what the API server sends.
func testdataObjects(tb testing.TB, file string) func() kruntime.Object {
	scheme := kruntime.NewScheme()
	require.NoError(tb, trainer.AddToScheme(scheme))
	require.NoError(tb, jobsetv1alpha2.AddToScheme(scheme))
	require.NoError(tb, schedulerpluginsv1alpha1.AddToScheme(scheme))
	decoder := serializer.NewCodecFactory(scheme).UniversalDeserializer()
	data, err := os.ReadFile(file)
	require.NoError(tb, err)
	return func() kruntime.Object {
		obj, _, err := decoder.Decode(data, nil, nil)
		require.NoError(tb, err)
		return obj
	}
}

func transformed(t *testing.T, transform toolscache.TransformFunc, obj kruntime.Object) kruntime.Object {
	out, err := transform(obj)
	require.NoError(t, err)
	return out.(kruntime.Object)
}

func TestCacheKeepsWhatTheControllersRead(t *testing.T) {
	t.Run("TrainJob: all but managed fields and kubectl's copy", func(t *testing.T) {
		tj := testdataObjects(t, "testdata/cached-trainjob.json")().(*trainer.TrainJob)
		tj.Annotations = map[string]string{corev1.LastAppliedConfigAnnotation: "{}", "team": "vision"}
		want := tj.DeepCopy()
		want.ManagedFields = nil
		want.Annotations = map[string]string{"team": "vision"}
		assert.Empty(t, cmp.Diff(want, transformed(t, keepTrainJob, tj.DeepCopy())))
	})
	t.Run("finished TrainJob: not what only builds its children", func(t *testing.T) {
		tj := testdataObjects(t, "testdata/cached-trainjob.json")().(*trainer.TrainJob)
		tj.Spec.Trainer = &trainer.Trainer{NumNodes: ptr.To[int32](2), Image: ptr.To("pytorch"), Args: []string{"-c", "def train(): ..."}}
		tj.Spec.Initializer = &trainer.Initializer{}
		tj.Spec.Labels, tj.Spec.Annotations = map[string]string{"team": "vision"}, map[string]string{"note": "x"}
		tj.Spec.PodSpecOverrides = []trainer.PodSpecOverride{{TargetJobs: []string{"node"}}}
		tj.Spec.RuntimePatches = []trainer.RuntimePatch{{Manager: "sdk"}}
		tj.Spec.TTLSecondsAfterFinished, tj.Spec.ActiveDeadlineSeconds = ptr.To[int32](60), ptr.To[int64](600)
		running := transformed(t, keepTrainJob, tj.DeepCopy()).(*trainer.TrainJob)
		assert.Empty(t, cmp.Diff(tj.Spec, running.Spec), "a TrainJob that runs keeps its whole spec")

		tj.Status.Conditions = append(tj.Status.Conditions, metav1.Condition{Type: trainer.TrainJobComplete, Status: metav1.ConditionTrue, Reason: "JobSetCompleted"})
		want := tj.Spec.DeepCopy()
		want.Trainer = &trainer.Trainer{NumNodes: ptr.To[int32](2)}
		want.Initializer, want.Labels, want.Annotations, want.PodSpecOverrides, want.RuntimePatches = nil, nil, nil, nil, nil
		finished := transformed(t, keepTrainJob, tj.DeepCopy()).(*trainer.TrainJob)
		assert.Empty(t, cmp.Diff(*want, finished.Spec))
		assert.Equal(t, tj.Status, finished.Status, "its status is whole")

		tj.Spec.Trainer = nil
		finished = transformed(t, keepTrainJob, tj.DeepCopy()).(*trainer.TrainJob)
		assert.Nil(t, finished.Spec.Trainer, "no trainer stays none")
	})
	t.Run("suspended TrainJob built from its spec: a summary with its spec's hashes", func(t *testing.T) {
		tj := testdataObjects(t, "testdata/cached-trainjob.json")().(*trainer.TrainJob)
		script := strings.Repeat("print('the training function')\n", 40)
		tj.Spec.Trainer = &trainer.Trainer{NumNodes: ptr.To[int32](2), Image: ptr.To("pytorch"), Args: []string{"-c", script}}
		tj.Spec.Suspend = ptr.To(true)
		require.True(t, jobSetMade(tj))
		elastic := &trainer.MLPolicy{MLPolicySource: trainer.MLPolicySource{Torch: &trainer.TorchMLPolicySource{ElasticPolicy: &trainer.TorchElasticPolicy{MaxNodes: ptr.To[int32](4)}}}}
		want := tj.Spec.DeepCopy()
		want.Trainer = &trainer.Trainer{NumNodes: ptr.To[int32](2)}
		summary := transformed(t, keepTrainJob, tj.DeepCopy()).(*trainer.TrainJob)
		assert.Empty(t, cmp.Diff(*want, summary.Spec))
		assert.True(t, framework.Summarized(summary))
		for _, p := range []*trainer.MLPolicy{nil, elastic} {
			assert.Equal(t, framework.SpecHash(tj, p), framework.SpecHash(summary, p), "the hash of the spec it had")
		}
		assert.NotEqual(t, framework.SpecHash(tj, nil), framework.SpecHash(tj, elastic))
		again := transformed(t, keepTrainJob, summary.DeepCopy()).(*trainer.TrainJob)
		assert.Equal(t, summary, again, "summarizing a summary changes nothing (the cache may transform an object twice)")

		whole := summary.DeepCopy()
		assert.False(t, framework.Whole(whole, &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{UID: "another", Generation: tj.Generation}, Spec: tj.Spec}),
			"another TrainJob of the name")
		assert.True(t, framework.Whole(whole, tj.DeepCopy()))
		assert.Empty(t, cmp.Diff(tj.Spec, whole.Spec))
		assert.False(t, framework.Summarized(whole))

		small := tj.DeepCopy()
		small.Spec.Trainer.Args = []string{"-c", "train()"}
		assert.Empty(t, cmp.Diff(small.Spec, transformed(t, keepTrainJob, small.DeepCopy()).(*trainer.TrainJob).Spec),
			"a summary costs more than the little it would drop")
		changed := tj.DeepCopy()
		changed.Generation++ // Changed while suspended, not built again yet: built from the cache.
		assert.Empty(t, cmp.Diff(changed.Spec, transformed(t, keepTrainJob, changed.DeepCopy()).(*trainer.TrainJob).Spec))
		resumed := tj.DeepCopy()
		resumed.Spec.Suspend = ptr.To(false)
		assert.Empty(t, cmp.Diff(resumed.Spec, transformed(t, keepTrainJob, resumed.DeepCopy()).(*trainer.TrainJob).Spec))
		notBuilt := tj.DeepCopy()
		notBuilt.Status = trainer.TrainJobStatus{}
		assert.Empty(t, cmp.Diff(notBuilt.Spec, transformed(t, keepTrainJob, notBuilt.DeepCopy()).(*trainer.TrainJob).Spec))

		// A user who writes the annotation, even with a value the cache made (it may be seen in a
		// status write's body), writes another resourceVersion: it is not a summary.
		key := summaryKey(t, summary)
		for _, value := range []string{"0123 1 a b", summary.Annotations[key]} {
			forged := resumed.DeepCopy()
			forged.ResourceVersion += "1"
			forged.Annotations = map[string]string{key: value}
			kept := transformed(t, keepTrainJob, forged).(*trainer.TrainJob)
			assert.False(t, framework.Summarized(kept), "a user's annotation of the name is not a summary")
			assert.NotContains(t, kept.Annotations, key, "and is dropped from the cache")
			assert.Equal(t, framework.SpecHash(tj, nil), framework.SpecHash(kept, nil))
		}
	})
	t.Run("JobSet: metadata but managed fields and labels, spec.suspend, status", func(t *testing.T) {
		js := testdataObjects(t, "testdata/cached-jobset.json")().(*jobsetv1alpha2.JobSet)
		js.Labels = map[string]string{"team": "vision"}
		js.Status = jobsetv1alpha2.JobSetStatus{TerminalState: "Completed",
			ReplicatedJobsStatus: []jobsetv1alpha2.ReplicatedJobStatus{{Name: "node", Succeeded: 2}}}
		want := &jobsetv1alpha2.JobSet{TypeMeta: js.TypeMeta, ObjectMeta: *js.ObjectMeta.DeepCopy(),
			Spec: jobsetv1alpha2.JobSetSpec{Suspend: js.Spec.Suspend}, Status: *js.Status.DeepCopy()}
		want.ManagedFields, want.Labels = nil, nil
		assert.Empty(t, cmp.Diff(want, transformed(t, keepJobSetSummary, js.DeepCopy())))
	})
	t.Run("PodGroup: metadata but managed fields and labels, minMember, status", func(t *testing.T) {
		pg := testdataObjects(t, "testdata/cached-podgroup.json")().(*schedulerpluginsv1alpha1.PodGroup)
		require.NotEmpty(t, pg.Spec.MinResources)
		require.NotEmpty(t, pg.Labels)
		want := pg.DeepCopy()
		want.ManagedFields, want.Labels = nil, nil
		want.Spec.MinResources = nil
		assert.Empty(t, cmp.Diff(want, transformed(t, keepPodGroupSummary, pg.DeepCopy())))
	})
}

// TestCachedObjectsShareTheirCommonStrings: two TrainJobs decoded apart hold one copy of what
// every TrainJob repeats, and their own of what is theirs.
func TestCachedObjectsShareTheirCommonStrings(t *testing.T) {
	same := func(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }
	trainJobs := testdataObjects(t, "testdata/cached-trainjob.json")
	a := transformed(t, keepTrainJob, trainJobs()).(*trainer.TrainJob)
	b := transformed(t, keepTrainJob, trainJobs()).(*trainer.TrainJob)
	require.NotEmpty(t, a.Status.Conditions)
	assert.True(t, same(a.Namespace, b.Namespace), "namespace")
	assert.True(t, same(*a.Spec.RuntimeRef.Kind, *b.Spec.RuntimeRef.Kind), "spec.runtimeRef.kind")
	assert.True(t, same(a.Spec.RuntimeRef.Name, b.Spec.RuntimeRef.Name), "spec.runtimeRef.name")
	assert.True(t, same(a.Status.Conditions[0].Reason, b.Status.Conditions[0].Reason), "a condition's reason")
	assert.False(t, same(string(a.UID), string(b.UID)), "the UID is each object's own")

	decodeJobSet := testdataObjects(t, "testdata/cached-jobset.json")
	jobSet := func() kruntime.Object {
		js := decodeJobSet().(*jobsetv1alpha2.JobSet)
		js.Annotations[trainingruntime.DigestAnnotation] = strings.Clone("sha256:b3259b2310b82377992927ff18701f394f5301f9601ad073d413b84ee967642c")
		return js
	}
	c := transformed(t, keepJobSetSummary, jobSet()).(*jobsetv1alpha2.JobSet)
	d := transformed(t, keepJobSetSummary, jobSet()).(*jobsetv1alpha2.JobSet)
	require.NotEmpty(t, c.OwnerReferences)
	assert.True(t, same(c.OwnerReferences[0].APIVersion, d.OwnerReferences[0].APIVersion), "an owner's apiVersion")
	assert.True(t, same(c.Annotations[trainingruntime.DigestAnnotation], d.Annotations[trainingruntime.DigestAnnotation]),
		"the digest of the runtime's copy, one per version of a runtime")
	assert.False(t, same(string(c.UID), string(d.UID)), "the UID is each object's own")
	for k := range c.Annotations {
		for l := range d.Annotations {
			if k == l {
				assert.True(t, same(k, l), "annotation key %s", k)
			}
		}
	}
}
