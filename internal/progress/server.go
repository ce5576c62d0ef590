package progress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/tokenreview"
)

// Defaults of the server's limits.
const (
	// DefaultInterval is the least time between two writes of one TrainJob's progress: a trainer
	// may report every few seconds, its TrainJob's status changes at most this often.
	DefaultInterval = 30 * time.Second
	// DefaultQPS bounds the progress writes of all TrainJobs together.
	DefaultQPS = 20
	// maxBody is the largest report accepted: 256 metrics of 64-character names and values fit.
	maxBody = 64 << 10
	// fieldManager owns status.trainerStatus.
	fieldManager = "trainer.kubeflow.org/progress"
)

// Reviews are the token reviews of the progress endpoint. A trainer reports with the same token
// for most of its hour: a good one is remembered for 5 minutes, a bad one for 10 seconds (a
// client repeating it costs no review). All reviews together are bounded at 100 a second, each
// waiting up to 10 seconds for its turn (and 10 more for the answer), so that a flood of made-up tokens cannot flood the API
// server through the endpoint; one client address may ask for 5 a second, 10 at once, and is
// refused past that without waiting, so that such a flood from one pod takes no other pod's turn
// (a trainer needs one review per token: when it starts, then every 5 minutes; the pods of a node
// on its host network share an address, hence the room).
var Reviews = tokenreview.Options{
	GoodTTL: 5 * time.Minute, BadTTL: 10 * time.Second, Size: 16384,
	QPS: 100, Wait: 10 * time.Second, Timeout: 10 * time.Second,
	ClientQPS: 5, ClientBurst: 10,
}

// Options tune the server.
type Options struct {
	// Interval is the least time between two writes of one TrainJob's progress; zero means
	// DefaultInterval.
	Interval time.Duration
	// QPS bounds the writes of all TrainJobs together; zero means DefaultQPS.
	QPS float64
}

// Server receives the trainers' reports on the webhook server and writes the latest of each
// TrainJob into its status.
type Server struct {
	client   client.Client
	interval time.Duration
	writes   flowcontrol.RateLimiter
	reviews  *tokenreview.Reviewer

	mu sync.Mutex
	// pending is each TrainJob's latest report not written yet.
	pending map[types.NamespacedName]*trainer.TrainerStatus
	// cooling holds the TrainJobs written less than an interval ago, or queued to be.
	cooling map[types.NamespacedName]bool
	queue   workqueue.TypedDelayingInterface[types.NamespacedName]
}

// Setup serves the endpoint on the manager's webhook server and starts its writer. The webhook
// server must have its certificate.
func Setup(mgr manager.Manager, opts Options) error {
	s := NewServer(mgr.GetClient(), opts)
	mgr.GetWebhookServer().Register(Pattern, s)
	return mgr.Add(s)
}

// NewServer returns a server that reviews tokens and writes reports with c. It writes once
// started (Start).
func NewServer(c client.Client, opts Options) *Server {
	if opts.Interval == 0 {
		opts.Interval = DefaultInterval
	}
	if opts.QPS == 0 {
		opts.QPS = DefaultQPS
	}
	return &Server{
		client:   c,
		interval: opts.Interval,
		writes:   flowcontrol.NewTokenBucketRateLimiter(float32(opts.QPS), max(1, int(opts.QPS))),
		reviews:  tokenreview.New(c, Reviews),
		pending:  map[types.NamespacedName]*trainer.TrainerStatus{},
		cooling:  map[types.NamespacedName]bool{},
		queue:    workqueue.NewTypedDelayingQueue[types.NamespacedName](),
	}
}

// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=trainer.kubeflow.org,resources=trainjobs/status,verbs=patch

// ServeHTTP takes one report: 200 once it is accepted (it is written within the interval), 401
// without a good token for the TrainJob, 404 for a TrainJob that does not exist, 413 for a body
// too large, 422 for a report that is not one, 429 when its client, or all clients together, asked
// for more token reviews than their budget (Reviews).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := types.NamespacedName{Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		refuse(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "a bearer token of the TrainJob's audience is required")
		return
	}
	switch ok, err := s.authenticate(r.Context(), tokenreview.Client(r), token, key); {
	case errors.Is(err, tokenreview.ErrTooMany):
		refuse(w, http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests, err.Error())
		return
	case err != nil:
		ctrl.LoggerFrom(r.Context()).Error(err, "Checking a progress report's token", "trainJob", key)
		refuse(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, "the token could not be checked")
		return
	case !ok:
		refuse(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized,
			"the token is not a service account token of namespace "+key.Namespace+" for audience "+Audience(key.Namespace, key.Name))
		return
	}

	req, err := decode(http.MaxBytesReader(w, r.Body, maxBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		refuse(w, http.StatusRequestEntityTooLarge, metav1.StatusReasonRequestEntityTooLarge, fmt.Sprintf("a report may have at most %d bytes", maxBody))
		return
	case err != nil:
		refuse(w, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, err.Error())
		return
	}
	if req.TrainerStatus != nil {
		if err := s.client.Get(r.Context(), key, &trainer.TrainJob{}); apierrors.IsNotFound(err) {
			refuse(w, http.StatusNotFound, metav1.StatusReasonNotFound, "TrainJob "+key.String()+" does not exist")
			return
		}
		if req.TrainerStatus.LastUpdatedTime.IsZero() {
			req.TrainerStatus.LastUpdatedTime = metav1.Now()
		}
		s.report(key, req.TrainerStatus)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(req)
}

// decode reads a report and checks it against the schema of status.trainerStatus, so that a
// report the API server would refuse is refused now, with the reason, and never written.
func decode(body io.Reader) (*trainer.UpdateTrainJobStatusRequest, error) {
	req := &trainer.UpdateTrainJobStatusRequest{}
	dec := json.NewDecoder(body)
	if err := dec.Decode(req); err != nil {
		return nil, fmt.Errorf("the body is not an UpdateTrainJobStatusRequest: %w", err)
	}
	if dec.More() {
		return nil, errors.New("the body holds more than one JSON value")
	}
	ts := req.TrainerStatus
	if ts == nil {
		return req, nil
	}
	path := field.NewPath("trainerStatus")
	var errs field.ErrorList
	if p := ts.ProgressPercentage; p != nil && (*p < 0 || *p > 100) {
		errs = append(errs, field.Invalid(path.Child("progressPercentage"), *p, "must be from 0 to 100"))
	}
	if e := ts.EstimatedRemainingSeconds; e != nil && *e < 0 {
		errs = append(errs, field.Invalid(path.Child("estimatedRemainingSeconds"), *e, "must not be negative"))
	}
	if len(ts.Metrics) > 256 {
		errs = append(errs, field.TooMany(path.Child("metrics"), len(ts.Metrics), 256))
	}
	for i, m := range ts.Metrics {
		for _, f := range []struct{ name, value string }{{"name", m.Name}, {"value", m.Value}} {
			if n := utf8.RuneCountInString(f.value); n == 0 || n > 64 {
				errs = append(errs, field.Invalid(path.Child("metrics").Index(i).Child(f.name), f.value, "must have 1 to 64 characters"))
			}
		}
	}
	return req, errs.ToAggregate()
}

// authenticate reports whether the API server says the token is a service account's of the
// TrainJob's namespace, issued for the TrainJob's audience (and, for a pod's token, that the pod
// still exists). from is the client's address, for its budget of reviews.
func (s *Server) authenticate(ctx context.Context, from, token string, key types.NamespacedName) (bool, error) {
	user, err := s.reviews.Review(ctx, from, token, Audience(key.Namespace, key.Name))
	if err != nil || user == nil {
		return false, err
	}
	return strings.HasPrefix(user.Username, "system:serviceaccount:"+key.Namespace+":"), nil
}

// report keeps a TrainJob's latest report, and queues the TrainJob unless it was written less
// than an interval ago: then the cooldown's end writes the latest report.
func (s *Server) report(key types.NamespacedName, status *trainer.TrainerStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending[key] = status
	if !s.cooling[key] {
		s.cooling[key] = true
		s.queue.Add(key)
	}
}

// Start writes the queued reports until ctx ends.
func (s *Server) Start(ctx context.Context) error {
	go func() {
		<-ctx.Done()
		s.queue.ShutDown()
	}()
	for {
		key, shutdown := s.queue.Get()
		if shutdown {
			return nil
		}
		s.mu.Lock()
		status, ok := s.pending[key]
		delete(s.pending, key)
		if !ok {
			delete(s.cooling, key) // The interval passed with nothing new: the next report is written at once.
		}
		s.mu.Unlock()
		if ok {
			if err := s.writes.Wait(ctx); err == nil {
				s.write(ctx, key, status)
			}
			s.queue.AddAfter(key, s.interval)
		}
		s.queue.Done(key)
	}
}

// NeedLeaderElection is false: every replica serves reports, as every one serves webhooks.
func (s *Server) NeedLeaderElection() bool { return false }

// write replaces the TrainJob's status.trainerStatus with the report, every field of it: a field
// the report leaves out is removed. A report whose progress differs from the TrainJob's, as the
// server reads it, also sets status.lastProgressTime to now, in the same patch: the stall rule
// counts from it, on the operator's clock, never from the trainer's lastUpdatedTime.
func (s *Server) write(ctx context.Context, key types.NamespacedName, status *trainer.TrainerStatus) {
	fields := map[string]any{
		"progressPercentage": status.ProgressPercentage, "estimatedRemainingSeconds": status.EstimatedRemainingSeconds,
		"metrics": status.Metrics, "lastUpdatedTime": status.LastUpdatedTime,
	}
	written := map[string]any{"trainerStatus": fields}
	tj := &trainer.TrainJob{}
	err := s.client.Get(ctx, key, tj)
	if err == nil {
		if advanced(tj.Status.TrainerStatus, status) {
			written["lastProgressTime"] = metav1.Now()
		}
		var patch []byte
		if patch, err = json.Marshal(map[string]any{"status": written}); err == nil {
			err = s.client.Status().Patch(ctx, tj, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(fieldManager))
		}
	}
	if client.IgnoreNotFound(err) != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Writing a TrainJob's progress", "trainJob", key)
	}
}

// advanced reports whether a report says the training moved since the last one written: its
// progressPercentage or its metrics (by name, in any order) differ. Its lastUpdatedTime, the
// trainer's clock, does not count: a trainer that hangs may well go on reporting the same step;
// nor does its estimatedRemainingSeconds alone, which a heartbeat may recompute from the clock.
func advanced(last, report *trainer.TrainerStatus) bool {
	if last == nil {
		return true
	}
	return !ptr.Equal(last.ProgressPercentage, report.ProgressPercentage) || !maps.Equal(metricValues(last), metricValues(report))
}

// metricValues is a report's metrics by name: the order they come in says nothing.
func metricValues(s *trainer.TrainerStatus) map[string]string {
	m := make(map[string]string, len(s.Metrics))
	for _, metric := range s.Metrics {
		m[metric.Name] = metric.Value
	}
	return m
}

// refuse answers with a Status, as the API server does.
func refuse(w http.ResponseWriter, code int, reason metav1.StatusReason, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Code: int32(code), Reason: reason, Message: message,
	})
}
