package controller

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	jsonserializer "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	restclientwatch "k8s.io/client-go/rest/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	schedulerpluginsv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"

	trainer "github.com/trainjob/operator/api/v1alpha1"
)

func watchScheme(t testing.TB) *kruntime.Scheme {
	scheme := kruntime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, trainer.AddToScheme(scheme))
	require.NoError(t, jobsetv1alpha2.AddToScheme(scheme))
	require.NoError(t, schedulerpluginsv1alpha1.AddToScheme(scheme))
	return scheme
}

// decodeWatch decodes a watch stream with a NegotiatedSerializer's JSON, as client-go's REST
// client does, and returns its events until the stream's error (io.EOF at its end).
func decodeWatch(t testing.TB, codecs kruntime.NegotiatedSerializer, stream io.Reader) ([]watch.Event, error) {
	info, ok := kruntime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), kruntime.ContentTypeJSON)
	require.True(t, ok)
	objects := codecs.DecoderToVersion(info.Serializer, nil)
	frames := info.StreamSerializer.Framer.NewFrameReader(io.NopCloser(stream))
	decoder := restclientwatch.NewDecoder(streaming.NewDecoder(frames, info.StreamSerializer.Serializer), objects)
	var events []watch.Event
	for {
		kind, obj, err := decoder.Decode()
		if err != nil {
			return events, err
		}
		events = append(events, watch.Event{Type: kind, Object: obj})
	}
}

// watchEvent writes a watch event as the API server does.
func watchEvent(t testing.TB, kind watch.EventType, object []byte) []byte {
	data, err := json.Marshal(metav1.WatchEvent{Type: string(kind), Object: kruntime.RawExtension{Raw: object}})
	require.NoError(t, err)
	return append(data, '\n')
}

func compacted(t testing.TB, file string) []byte {
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, json.Compact(&out, data))
	return out.Bytes()
}

// The watches of custom resources decode to what client-go's decoding makes of the same stream,
// event by event, whatever the stream's reads and the events' sizes, for what the API server
// writes and for what it does not (where the decoding falls back on client-go's).
func TestWatchJSONDecodesAsClientGo(t *testing.T) {
	scheme := watchScheme(t)
	theirs := serializer.WithoutConversionCodecFactory{CodecFactory: serializer.NewCodecFactory(scheme)}
	ours, err := newJSONOnce(scheme, true)
	require.NoError(t, err)
	whole, err := newJSONOnce(scheme, false)
	require.NoError(t, err)

	jobSet, trainJob, podGroup := compacted(t, "testdata/cached-jobset.json"), compacted(t, "testdata/cached-trainjob.json"), compacted(t, "testdata/cached-podgroup.json")
	// A trainer as the SDK writes it: a function's source, with quotes, backslashes, braces and
	// brackets in strings, and characters JSON escapes.
	sdk := bytes.Replace(trainJob, []byte(`"spec":{`), []byte(`"spec":{"trainer":{"args":["-c","def train():\n    print(\"{[}]\\\\\" + '\"' + \"\\u00e9 \\\\\")\n    return {\"a\": [1, {}]}\n\\\\"],"numNodes":2},`), 1)
	require.True(t, json.Valid(sdk))
	pretty, err := os.ReadFile("testdata/cached-podgroup.json")
	require.NoError(t, err)
	kindFirst := []byte(`{"kind":"JobSet","apiVersion":"jobset.x-k8s.io/v1alpha2","metadata":{"resourceVersion":"12","annotations":{"k8s.io/initial-events-end":"true"}}}`)
	status := []byte(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (5)","reason":"Expired","code":410}`)
	metadataFirst := bytes.Replace(trainJob, []byte(`{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob",`), []byte(`{"metadata":{"name":"first"},"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob",`), 1)
	require.NotEqual(t, trainJob, metadataFirst)

	// A JobSet with labels, suspended, with a status.
	var running map[string]any
	require.NoError(t, json.Unmarshal(jobSet, &running))
	meta := running["metadata"].(map[string]any)
	meta["labels"] = map[string]any{"trainer.kubeflow.org/trainjob-name": "tj-1234", "team": "a"}
	running["spec"].(map[string]any)["suspend"] = true
	running["status"] = map[string]any{
		"conditions": []any{map[string]any{"type": "Suspended", "status": "True", "reason": "SuspendedJobs", "message": "jobs are suspended", "lastTransitionTime": "2026-11-28T10:00:00Z"}},
		"restarts":   3, "restartsCountTowardsMax": 1, "terminalState": "", "replicatedJobsStatus": []any{map[string]any{"name": "node", "ready": 1, "succeeded": 0, "failed": 1, "active": 1, "suspended": 1}},
	}
	suspended, err := json.Marshal(running)
	require.NoError(t, err)

	var stream bytes.Buffer
	stream.Write(watchEvent(t, watch.Added, jobSet))
	stream.Write(watchEvent(t, watch.Modified, suspended))
	stream.Write(watchEvent(t, watch.Added, trainJob))
	stream.WriteString("  \r\n\t")
	stream.Write(watchEvent(t, watch.Modified, sdk))
	stream.Write(watchEvent(t, watch.Added, podGroup))
	stream.Write(watchEvent(t, watch.Bookmark, kindFirst))
	stream.Write(watchEvent(t, watch.Deleted, metadataFirst))
	// Not as the API server writes them: decoded as client-go does.
	stream.WriteString("{ \"type\" : \"MODIFIED\",\n \"object\": " + string(pretty) + "}\n")
	stream.WriteString(`{"object":` + string(podGroup) + `,"type":"DELETED"}`)
	stream.WriteString(`{"type":"ADDED","object":` + string(trainJob) + `,"more":{"a":"}"}}`)
	stream.WriteString(`{"type":"MODIFIED","object":` + string(jobSet) + ` }` + "\n")
	stream.Write(watchEvent(t, watch.Error, status))

	want, wantErr := decodeWatch(t, theirs, bytes.NewReader(stream.Bytes()))
	require.ErrorIs(t, wantErr, io.EOF)
	require.Len(t, want, 12)
	assert.Contains(t, want[3].Object.(*trainer.TrainJob).Spec.Trainer.Args[1], `print("{[}]\\"`)
	require.NotEmpty(t, want[0].Object.(*jobsetv1alpha2.JobSet).Spec.ReplicatedJobs)
	require.Len(t, want[1].Object.(*jobsetv1alpha2.JobSet).Status.ReplicatedJobsStatus, 1)

	// Unless it summarizes JobSets, it decodes each whole.
	got, err := decodeWatch(t, whole, bytes.NewReader(stream.Bytes()))
	require.ErrorIs(t, err, io.EOF)
	require.Len(t, got, len(want))
	for i := range want {
		assert.Empty(t, cmp.Diff(want[i].Object, got[i].Object), "event %d", i)
	}
	// Of a JobSet, it decodes what the cache keeps (keepJobSetSummary): the two are the same once
	// the cache has taken what it keeps.
	keep := func(events []watch.Event) {
		for _, e := range events {
			if _, ok := e.Object.(*jobsetv1alpha2.JobSet); ok {
				_, err := keepJobSetSummary(e.Object)
				require.NoError(t, err)
			}
		}
	}
	keep(want)
	for name, reader := range map[string]func(io.Reader) io.Reader{
		"whole":        func(r io.Reader) io.Reader { return r },
		"byte by byte": iotest.OneByteReader,
		"in halves":    iotest.HalfReader,
	} {
		t.Run(name, func(t *testing.T) {
			got, err := decodeWatch(t, ours, reader(bytes.NewReader(stream.Bytes())))
			require.ErrorIs(t, err, io.EOF)
			require.Len(t, got, len(want))
			assert.Empty(t, got[0].Object.(*jobsetv1alpha2.JobSet).Spec.ReplicatedJobs, "a JobSet's pod templates decoded")
			keep(got)
			for i := range want {
				assert.Equal(t, want[i].Type, got[i].Type, "event %d", i)
				assert.Empty(t, cmp.Diff(want[i].Object, got[i].Object), "event %d", i)
			}
		})
	}
}

// A watch stream that ends within an event, or holds what is not an event, fails its watch (the
// reflector watches again).
func TestWatchJSONRefusesBrokenStreams(t *testing.T) {
	ours, err := newJSONOnce(watchScheme(t), true)
	require.NoError(t, err)
	podGroup := compacted(t, "testdata/cached-podgroup.json")
	whole := watchEvent(t, watch.Added, podGroup)
	for name, tc := range map[string]struct {
		stream  string
		wantErr string
	}{
		"cut within an event":         {stream: string(whole[:len(whole)/2]), wantErr: io.ErrUnexpectedEOF.Error()},
		"cut within a string":         {stream: `{"type":"ADDED","object":{"a":"b`, wantErr: io.ErrUnexpectedEOF.Error()},
		"not an object":               {stream: `["ADDED"]`, wantErr: "not an object"},
		"an object that is not JSON":  {stream: `{"type":"ADDED","object":{"apiVersion":"v1","kind":"Status",]}}`, wantErr: "unable to decode watch event"},
		"an event with no type known": {stream: `{"type":"RENAMED","object":` + string(podGroup) + `}`, wantErr: "invalid watch event type"},
	} {
		t.Run(name, func(t *testing.T) {
			events, err := decodeWatch(t, ours, strings.NewReader(tc.stream))
			assert.Empty(t, events)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.wantErr)
		})
	}
}

// The framer finds the same objects in a stream as apimachinery's JSON framer, which decodes each.
func FuzzJSONFrames(f *testing.F) {
	for _, seed := range []string{
		`{"a":1}{"b":[1,{"c":"}"}]}`,
		`{"s":"\"}\\"}  {"t":"\\\\\"{"}` + "\n",
		`{"type":"ADDED","object":{"kind":"X","spec":{"args":["{[","]}\\\""]}}}`,
		`{}{}{}`,
		`{"a":"é\u00e9"}` + "\t\r\n" + `{"b":null}`,
	} {
		f.Add([]byte(seed), uint8(7))
	}
	f.Fuzz(func(t *testing.T, stream []byte, chunk uint8) {
		theirs := jsonFramesOf(t, serializer.NewCodecFactory(kruntime.NewScheme()).SupportedMediaTypes(), stream, 0)
		ours := jsonFramesOf(t, []kruntime.SerializerInfo{{MediaType: kruntime.ContentTypeJSON, StreamSerializer: &kruntime.StreamSerializerInfo{Framer: jsonFrames{}}}}, stream, int(chunk))
		// Where apimachinery's framer finds objects, ours finds the same; past what it refuses or
		// a value that is not an object, ours may differ: the decoding refuses what is not JSON.
		for i, frame := range theirs {
			if len(frame) == 0 || frame[0] != '{' {
				return
			}
			require.Greater(t, len(ours), i, "frame %d: %q", i, frame)
			require.Equal(t, string(frame), string(ours[i]), "frame %d", i)
		}
	})
}

// jsonFramesOf returns the frames a JSON framer finds in stream, read chunk bytes at a time (all
// at once for 0), into a buffer of 8 bytes that grows as client-go's stream decoder's does.
func jsonFramesOf(t *testing.T, infos []kruntime.SerializerInfo, stream []byte, chunk int) [][]byte {
	info, ok := kruntime.SerializerInfoForMediaType(infos, kruntime.ContentTypeJSON)
	require.True(t, ok)
	var r io.Reader = bytes.NewReader(stream)
	if chunk > 0 {
		r = &chunked{r: r, n: chunk}
	}
	frames := info.StreamSerializer.Framer.NewFrameReader(io.NopCloser(r))
	var out [][]byte
	for {
		var frame []byte
		buf := make([]byte, 8)
		for {
			n, err := frames.Read(buf)
			frame = append(frame, buf[:n]...)
			if errors.Is(err, io.ErrShortBuffer) {
				buf = make([]byte, 2*len(buf))
				continue
			}
			if err != nil {
				return out
			}
			break
		}
		out = append(out, frame)
	}
}

// chunked reads at most n bytes at a time.
type chunked struct {
	r io.Reader
	n int
}

func (c *chunked) Read(p []byte) (int, error) {
	return c.r.Read(p[:min(len(p), c.n)])
}

func TestTypeMetaFirst(t *testing.T) {
	for _, data := range []string{
		`{"apiVersion":"trainer.kubeflow.org/v1alpha1","kind":"TrainJob","metadata":{}}`,
		`{"kind":"TrainJob","apiVersion":"trainer.kubeflow.org/v1alpha1"}`,
		`{"apiVersion":"v1","kind":"Status"}`,
		`{"metadata":{"name":"a"},"apiVersion":"v1","kind":"Pod"}`,
		`{"apiVersion":"v1","apiVersion":"v2","kind":"Pod"}`,
		`{"apiVersion":"a/b/c","kind":"Pod"}`,
		`{"apiVersion":"v\u0031","kind":"Pod"}`,
		`{"apiVersion":"v1"}`,
		`{"apiVersion":"v1","kind":"Pod"`,
		`{}`,
	} {
		t.Run(data, func(t *testing.T) {
			want, wantErr := jsonserializer.DefaultMetaFactory.Interpret([]byte(data))
			got, err := typeMetaFirst{}.Interpret([]byte(data))
			assert.Equal(t, fmt.Sprint(wantErr), fmt.Sprint(err))
			assert.Equal(t, want, got)
		})
	}
}

// The informers that decode their watches so are those of the typed kinds served in JSON only,
// read cluster-wide, with no field selector: the cache's other settings are left to
// controller-runtime.
func TestWatchJSONOnlyWhereItMirrorsTheCache(t *testing.T) {
	scheme := watchScheme(t)
	mapper := apimeta.NewDefaultRESTMapper(nil)
	for _, gvk := range []schema.GroupVersionKind{
		jobsetv1alpha2.GroupVersion.WithKind("JobSet"), trainer.GroupVersion.WithKind("TrainJob"),
		batchv1.SchemeGroupVersion.WithKind("Job"),
	} {
		mapper.Add(gvk, apimeta.RESTScopeNamespace)
	}
	plain := cache.Options{Scheme: scheme, Mapper: mapper, HTTPClient: http.DefaultClient}
	lw := &toolscache.ListWatch{}
	watched := func(t *testing.T, opts cache.Options, obj kruntime.Object) bool {
		w, err := newWatchJSON(&rest.Config{Host: "https://example.com"}, opts)
		require.NoError(t, err)
		if w == nil {
			return false
		}
		got, err := w.watcher(lw, obj)
		require.NoError(t, err)
		return got != nil
	}
	assert.True(t, watched(t, plain, &jobsetv1alpha2.JobSet{}))
	assert.True(t, watched(t, plain, &trainer.TrainJob{}))
	assert.False(t, watched(t, plain, &batchv1.Job{}), "a built-in kind, read in protobuf")
	assert.False(t, watched(t, plain, &metav1.PartialObjectMetadata{}))
	assert.False(t, watched(t, plain, &unstructured.Unstructured{}))

	labelled := plain
	labelled.ByObject = map[client.Object]cache.ByObject{&jobsetv1alpha2.JobSet{}: {Label: labels.SelectorFromSet(labels.Set{"a": "b"})}}
	assert.True(t, watched(t, labelled, &jobsetv1alpha2.JobSet{}), "a label selector is applied")
	for name, opts := range map[string]cache.Options{
		"a field selector": withByObject(plain, cache.ByObject{Field: fields.OneTermEqualSelector("metadata.name", "a")}),
		"some namespaces":  withByObject(plain, cache.ByObject{Namespaces: map[string]cache.Config{"a": {}}}),
	} {
		assert.False(t, watched(t, opts, &jobsetv1alpha2.JobSet{}), name)
		assert.True(t, watched(t, opts, &trainer.TrainJob{}), name+", of another kind")
	}
	for name, edit := range map[string]func(*cache.Options){
		"default namespaces":     func(o *cache.Options) { o.DefaultNamespaces = map[string]cache.Config{"a": {}} },
		"a default label":        func(o *cache.Options) { o.DefaultLabelSelector = labels.Everything() },
		"a default field":        func(o *cache.Options) { o.DefaultFieldSelector = fields.Everything() },
		"another informer maker": func(o *cache.Options) { o.NewInformer = toolscache.NewSharedIndexInformer },
	} {
		opts := plain
		edit(&opts)
		assert.False(t, watched(t, opts, &trainer.TrainJob{}), name)
	}
}

func withByObject(opts cache.Options, by cache.ByObject) cache.Options {
	opts.ByObject = map[client.Object]cache.ByObject{&jobsetv1alpha2.JobSet{}: by}
	return opts
}

// A cache's watches decode JobSets as summaries only where the cache keeps no more of them.
func TestWatchJSONSummarizesJobSetsOnlyWhereTheCacheDoes(t *testing.T) {
	summarizes := func(transform toolscache.TransformFunc) bool {
		opts := cache.Options{
			Scheme: watchScheme(t), Mapper: apimeta.NewDefaultRESTMapper(nil), HTTPClient: http.DefaultClient,
			ByObject: map[client.Object]cache.ByObject{&jobsetv1alpha2.JobSet{}: {Transform: transform}},
		}
		w, err := newWatchJSON(&rest.Config{}, opts)
		require.NoError(t, err)
		require.NotNil(t, w)
		info, ok := kruntime.SerializerInfoForMediaType(w.codecs.SupportedMediaTypes(), kruntime.ContentTypeJSON)
		require.True(t, ok)
		return info.Serializer.(onceDecoder).summarizeJobSets
	}
	assert.True(t, summarizes(keepJobSetSummary))
	assert.False(t, summarizes(nil))
	assert.False(t, summarizes(shareChildMetadata), "a cache that keeps a JobSet's spec")
}
