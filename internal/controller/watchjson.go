package controller

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	jsonserializer "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	kjson "sigs.k8s.io/json"
)

// The watches of the kinds served in JSON only (custom resources: TrainJobs, JobSets, PodGroups)
// are read with a decoder that reads each event's bytes four times (to find where the event ends
// and where its object ends, then twice to decode the object, which is checked whole first) where
// client-go's reads them nine times: its framer scans the event, its serializer scans it twice to
// find a kind the event has not got, twice more to decode the event and copy out its object, then
// twice to find the object's kind and twice to decode it. At a restart with 50,000 TrainJobs that
// was two thirds of the manager's CPU (docs/performance.md). Of what the API server writes for
// these kinds, each event and object decodes to what client-go's decoding makes of it, but a
// JobSet, of which a cache that keeps its summary (keepJobSetSummary) decodes no more
// (TestWatchJSONDecodesAsClientGo); an event written otherwise is decoded by client-go's decoder.
// One difference is left: an object's kind is read from its first fields, where client-go reads the
// last of its keys that match "apiVersion" and "kind" without regard to case; only a custom
// resource that keeps unknown fields at its root could hold a second, and there client-go's
// decoding would make an object of another kind, which the informer refuses.

// NewCache is controller-runtime's cache (cache.New) whose informers of the typed kinds served in
// JSON only decode their watches with jsonOnce: the manager's NewCache. It is given the cache's
// options as the manager completed them, with the selectors each kind is read with. A cache read
// in some namespaces only, or with selectors for every kind, is left to controller-runtime whole.
func NewCache(config *rest.Config, opts cache.Options) (cache.Cache, error) {
	if w, err := newWatchJSON(config, opts); err != nil {
		return nil, err
	} else if w != nil {
		opts.NewInformer = w.NewInformer
	}
	return cache.New(config, opts)
}

// watchJSON is the cache's informer constructor: the watches of typed kinds served in JSON only
// are decoded by jsonOnce, the rest as controller-runtime decodes them.
type watchJSON struct {
	scheme     *runtime.Scheme
	mapper     meta.RESTMapper
	config     *rest.Config
	httpClient *http.Client
	// byObject is the cache's configuration by kind, whose label selectors and bookmarks these
	// watches apply as controller-runtime does to its own. A kind read in some namespaces only,
	// or with a field selector, is left to controller-runtime.
	byObject  map[schema.GroupVersionKind]cache.ByObject
	bookmarks bool
	codecs    runtime.NegotiatedSerializer
}

// newWatchJSON returns nil for options that it does not mirror.
func newWatchJSON(config *rest.Config, opts cache.Options) (*watchJSON, error) {
	if opts.Scheme == nil || opts.Mapper == nil || opts.HTTPClient == nil || opts.NewInformer != nil ||
		len(opts.DefaultNamespaces) > 0 || opts.DefaultLabelSelector != nil || opts.DefaultFieldSelector != nil {
		return nil, nil
	}
	w := &watchJSON{
		scheme: opts.Scheme, mapper: opts.Mapper, config: config, httpClient: opts.HTTPClient,
		byObject:  map[schema.GroupVersionKind]cache.ByObject{},
		bookmarks: ptr.Deref(opts.DefaultEnableWatchBookmarks, true),
	}
	for obj, by := range opts.ByObject {
		gvk, err := apiutil.GVKForObject(obj, opts.Scheme)
		if err != nil {
			return nil, err
		}
		w.byObject[gvk] = by
	}
	// JobSets are decoded as summaries only for a cache that keeps no more of them.
	summary := w.byObject[jobSetKind].Transform
	summarize := summary != nil && reflect.ValueOf(summary).Pointer() == reflect.ValueOf(keepJobSetSummary).Pointer()
	var err error
	if w.codecs, err = newJSONOnce(opts.Scheme, summarize); err != nil {
		return nil, err
	}
	return w, nil
}

// NewInformer is controller-runtime's cache.Options.NewInformer.
func (w *watchJSON) NewInformer(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	// A kind this cannot watch (its mapping unknown) is left to controller-runtime's own
	// watch, which reports why.
	if watched, err := w.watcher(lw, obj); err == nil && watched != nil {
		lw = watched
	}
	return toolscache.NewSharedIndexInformer(lw, obj, resync, indexers)
}

// watcher is lw with its watches decoded by jsonOnce, or nil for an object that is not a typed
// kind served in JSON only (a built-in kind, read in protobuf; a metadata-only or unstructured
// one) or is read in some namespaces only or by a field selector.
func (w *watchJSON) watcher(lw toolscache.ListerWatcher, obj runtime.Object) (toolscache.ListerWatcher, error) {
	switch obj.(type) {
	case runtime.Unstructured, *metav1.PartialObjectMetadata:
		return nil, nil
	}
	gvk, err := apiutil.GVKForObject(obj, w.scheme)
	if err != nil || clientgoscheme.Scheme.Recognizes(gvk) {
		return nil, err
	}
	by := w.byObject[gvk]
	if len(by.Namespaces) > 0 || (by.Field != nil && !by.Field.Empty()) {
		return nil, nil
	}
	bookmarks := ptr.Deref(by.EnableWatchBookmarks, w.bookmarks)
	mapping, err := w.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(w.config)
	gv := gvk.GroupVersion()
	cfg.GroupVersion, cfg.APIPath = &gv, "/apis"
	cfg.ContentType, cfg.AcceptContentTypes = runtime.ContentTypeJSON, runtime.ContentTypeJSON
	cfg.NegotiatedSerializer = w.codecs
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	c, err := rest.RESTClientForConfigAndClient(cfg, w.httpClient)
	if err != nil {
		return nil, err
	}
	params := runtime.NewParameterCodec(w.scheme)
	listed := toolscache.ToListerWatcherWithContext(lw)
	return &toolscache.ListWatch{
		ListWithContextFunc: listed.ListWithContext,
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.Watch, opts.AllowWatchBookmarks = true, bookmarks
			if by.Label != nil && !by.Label.Empty() {
				opts.LabelSelector = by.Label.String()
			}
			return c.Get().Resource(mapping.Resource.Resource).VersionedParams(&opts, params).Watch(ctx)
		},
	}, nil
}

// jsonOnce is the scheme's codecs but for JSON, whose stream is framed by jsonFrames and decoded
// by onceDecoder; made once, for every watch of the cache.
type jsonOnce struct {
	runtime.NegotiatedSerializer
	infos []runtime.SerializerInfo
}

// newJSONOnce makes the codecs; with summarizeJobSets, a JobSet is decoded as decodeJobSetSummary
// decodes it.
func newJSONOnce(scheme *runtime.Scheme, summarizeJobSets bool) (jsonOnce, error) {
	codecs := serializer.WithoutConversionCodecFactory{CodecFactory: serializer.NewCodecFactory(scheme)}
	events, _, err := scheme.ObjectKinds(&metav1.WatchEvent{})
	if err != nil {
		return jsonOnce{}, err
	}
	var infos []runtime.SerializerInfo
	for _, info := range codecs.SupportedMediaTypes() {
		if info.MediaType == runtime.ContentTypeJSON && info.StreamSerializer != nil {
			decoder := onceDecoder{
				Serializer:       info.Serializer,
				objects:          jsonserializer.NewSerializerWithOptions(typeMetaFirst{}, scheme, scheme, jsonserializer.SerializerOptions{}),
				event:            events[0],
				summarizeJobSets: summarizeJobSets,
			}
			info.Serializer = decoder
			stream := *info.StreamSerializer
			stream.Serializer, stream.Framer = decoder, jsonFrames{}
			info.StreamSerializer = &stream
		}
		infos = append(infos, info)
	}
	return jsonOnce{NegotiatedSerializer: codecs, infos: infos}, nil
}

func (j jsonOnce) SupportedMediaTypes() []runtime.SerializerInfo { return j.infos }

// onceDecoder decodes a watch event by slicing its object out of it, and an object by reading
// its kind from its first two fields; what it does not recognize it decodes as client-go would.
// It encodes as client-go would.
type onceDecoder struct {
	runtime.Serializer
	// objects is client-go's JSON serializer but for how it reads an object's kind.
	objects runtime.Serializer
	// event is the kind of a watch event, as client-go's decoding returns it.
	event schema.GroupVersionKind
	// summarizeJobSets decodes a JobSet's summary only (decodeJobSetSummary).
	summarizeJobSets bool
}

func (d onceDecoder) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	if event, ok := into.(*metav1.WatchEvent); ok {
		if kind, object, ok := splitWatchEvent(data); ok {
			// object is part of the stream decoder's buffer, decoded before the next event is
			// read into it; nothing in a decoded object keeps the bytes it was decoded from.
			event.Type, event.Object = kind, runtime.RawExtension{Raw: object}
			gvk := d.event
			return event, &gvk, nil
		}
		return d.Serializer.Decode(data, defaults, into)
	}
	if into == nil && d.summarizeJobSets {
		if gvk, err := (typeMetaFirst{}).Interpret(data); err == nil && *gvk == jobSetKind {
			if js, err := decodeJobSetSummary(data); err == nil {
				return js, gvk, nil
			}
		}
	}
	return d.objects.Decode(data, defaults, into)
}

var jobSetKind = jobsetv1alpha2.GroupVersion.WithKind("JobSet")

// decodeJobSetSummary decodes of a JobSet only what the cache keeps of it (keepJobSetSummary):
// its metadata, spec.suspend and status. The decoder skips the rest of its spec, its pod
// templates (the trainer's command and arguments: a training function's source, for the SDK's
// TrainJobs; the progress endpoint's CA), rather than decoding them into structs and strings that
// the transform then drops: at a restart with tens of thousands of JobSets, most of the garbage.
func decodeJobSetSummary(data []byte) (*jobsetv1alpha2.JobSet, error) {
	var summary struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata,omitempty"`
		Spec              struct {
			Suspend *bool `json:"suspend,omitempty"`
		} `json:"spec"`
		Status jobsetv1alpha2.JobSetStatus `json:"status,omitempty"`
	}
	// As client-go's JSON serializer decodes a typed object.
	if err := kjson.UnmarshalCaseSensitivePreserveInts(data, &summary); err != nil {
		return nil, err
	}
	return &jobsetv1alpha2.JobSet{
		TypeMeta: summary.TypeMeta, ObjectMeta: summary.ObjectMeta,
		Spec: jobsetv1alpha2.JobSetSpec{Suspend: summary.Spec.Suspend}, Status: summary.Status,
	}, nil
}

// splitWatchEvent reads a watch event as the API server writes it, {"type":"T","object":{...}},
// and returns T and the object's bytes. An event it cannot read so (other fields, in another
// order, spaces) is not ok.
func splitWatchEvent(data []byte) (string, []byte, bool) {
	const typeKey, objectKey = `{"type":"`, `","object":`
	rest, ok := bytes.CutPrefix(data, []byte(typeKey))
	if !ok {
		return "", nil, false
	}
	end := bytes.IndexByte(rest, '"')
	if end < 0 || bytes.IndexByte(rest[:end], '\\') >= 0 {
		return "", nil, false
	}
	kind := string(rest[:end])
	object, ok := bytes.CutPrefix(rest[end:], []byte(objectKey))
	if !ok || len(object) == 0 || object[0] != '{' {
		return "", nil, false
	}
	var scan jsonScan
	n, closed := scan.value(object, 0)
	if !closed || string(bytes.TrimRight(object[n:], " \t\r\n")) != "}" {
		return "", nil, false
	}
	return kind, object[:n], true
}

// typeMetaFirst finds an object's kind in its first two fields, apiVersion and kind in either
// order, where the API server writes them; an object whose first fields are not these, or whose
// values are escaped, it reads as client-go does, from the whole object.
type typeMetaFirst struct{}

func (typeMetaFirst) Interpret(data []byte) (*schema.GroupVersionKind, error) {
	var apiVersion, kind string
	rest, ok := bytes.CutPrefix(data, []byte("{"))
	for i := 0; ok && i < 2; i++ {
		var key, value string
		if key, value, rest, ok = stringField(rest); !ok {
			break
		}
		switch {
		case key == "apiVersion" && apiVersion == "":
			apiVersion = value
		case key == "kind" && kind == "":
			kind = value
		default:
			ok = false
		}
		if ok && i == 0 {
			rest, ok = bytes.CutPrefix(rest, []byte(","))
		}
	}
	if !ok || !(len(rest) > 0 && (rest[0] == ',' || rest[0] == '}')) {
		return jsonserializer.DefaultMetaFactory.Interpret(data)
	}
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return nil, err
	}
	gvk := gv.WithKind(kind)
	return &gvk, nil
}

// stringField reads "key":"value" with neither escaped, and returns what follows.
func stringField(data []byte) (key, value string, rest []byte, ok bool) {
	k, rest, ok := quoted(data)
	if !ok {
		return "", "", nil, false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(":")); !ok {
		return "", "", nil, false
	}
	v, rest, ok := quoted(rest)
	return string(k), string(v), rest, ok
}

// quoted reads a string without escapes.
func quoted(data []byte) ([]byte, []byte, bool) {
	rest, ok := bytes.CutPrefix(data, []byte(`"`))
	if !ok {
		return nil, nil, false
	}
	end := bytes.IndexByte(rest, '"')
	if end < 0 || bytes.IndexByte(rest[:end], '\\') >= 0 {
		return nil, nil, false
	}
	return rest[:end], rest[end+1:], true
}

// jsonFrames is a runtime.Framer of a stream of JSON objects, as the API server writes a watch.
type jsonFrames struct{}

func (jsonFrames) NewFrameReader(r io.ReadCloser) io.ReadCloser {
	return &frameReader{r: r}
}

func (jsonFrames) NewFrameWriter(w io.Writer) io.Writer { return w }

// frameReader returns one JSON object of its stream at each Read, as apimachinery's JSON framer
// does, or its first part with io.ErrShortBuffer when the caller's buffer is too small, the rest
// at the next Reads. It finds an object's end by its braces and its strings' quotes; the
// decoding of each object checks it whole.
type frameReader struct {
	r io.ReadCloser
	// buf holds what was read of the stream; buf[off:] is not yet framed.
	buf []byte
	off int
	// remaining is what the last Read could not return of its frame.
	remaining []byte
}

// maxFrame is the largest event read: the API server refuses objects past 3 MiB (etcd's limit
// of 1.5 MiB, JSON escaping), and client-go's stream decoder stops at 16 MiB.
const maxFrame = 16 << 20

var errFrameTooLarge = errors.New("a watch event is larger than 16 MiB")

func (f *frameReader) Read(p []byte) (int, error) {
	if len(f.remaining) == 0 {
		frame, err := f.next()
		if err != nil {
			return 0, err
		}
		f.remaining = frame
	}
	n := copy(p, f.remaining)
	f.remaining = f.remaining[n:]
	if len(f.remaining) > 0 {
		return n, io.ErrShortBuffer
	}
	return n, nil
}

func (f *frameReader) Close() error { return f.r.Close() }

// next returns the next object of the stream, part of buf until the next call.
func (f *frameReader) next() ([]byte, error) {
	var scan jsonScan
	start, i := -1, f.off // where the object begins, and how far it was read
	for {
		if start < 0 {
			for ; i < len(f.buf) && isSpace(f.buf[i]); i++ {
			}
			if i < len(f.buf) {
				if f.buf[i] != '{' {
					return nil, fmt.Errorf("a watch event begins with %q, not an object", f.buf[i])
				}
				start = i
			}
		}
		if start >= 0 {
			var closed bool
			if i, closed = scan.value(f.buf, i); closed {
				f.off = i
				return f.buf[start:i], nil
			}
		}
		// Keep the object begun, drop what was framed before it, and read more.
		keep := i
		if start >= 0 {
			keep = start
		}
		n := copy(f.buf, f.buf[keep:])
		f.buf, i, f.off = f.buf[:n], i-keep, 0
		if start >= 0 {
			start = 0
			scan.text -= keep
		}
		if len(f.buf) >= maxFrame {
			return nil, errFrameTooLarge
		}
		if cap(f.buf)-len(f.buf) < 4096 {
			f.buf = append(f.buf, make([]byte, max(cap(f.buf), 32<<10))...)[:len(f.buf)]
		}
		read, err := f.r.Read(f.buf[len(f.buf):cap(f.buf)])
		f.buf = f.buf[:len(f.buf)+read]
		if err != nil && read == 0 {
			if err == io.EOF && start >= 0 {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// jsonScan follows the nesting of a JSON object or array by its brackets and its strings' quotes,
// across calls as more of it is read; it does not check the JSON (the decoding of the value does).
type jsonScan struct {
	depth    int
	inString bool
	// text is where the string being read begins.
	text int
}

// value scans data from i, which is at or within the value that begins the scan, and returns the
// index past its closing bracket and true, or len(data) and false when data ends first.
func (s *jsonScan) value(data []byte, i int) (int, bool) {
	for i < len(data) {
		if s.inString {
			end := bytes.IndexByte(data[i:], '"')
			if end < 0 {
				return len(data), false
			}
			i += end
			escapes := 0
			for j := i - 1; j >= s.text && data[j] == '\\'; j-- {
				escapes++
			}
			s.inString = escapes%2 == 1
			i++
			continue
		}
		switch data[i] {
		case '"':
			s.inString, s.text = true, i+1
		case '{', '[':
			s.depth++
		case '}', ']':
			if s.depth--; s.depth == 0 {
				return i + 1, true
			}
		}
		i++
	}
	return len(data), false
}
