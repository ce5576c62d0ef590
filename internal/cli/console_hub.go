package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainer "github.com/trainjob/operator/api/v1alpha1"
)

// Bounds of what the console keeps while it runs.
const (
	// maxHistory is how many progress reports the console keeps per TrainJob for its charts:
	// a report a minute for more than a day.
	maxHistory = 2000
	// maxPoints bounds the reports kept for all TrainJobs together (a few MB), whatever the
	// scope: past it, the histories of finished TrainJobs go first, the one reported last
	// longest ago first, then every other point of the longest history.
	maxPoints = 50000
	// subscriberBuffer is how many updates a browser may lag behind before it is dropped (its
	// EventSource connects again and gets a fresh snapshot).
	subscriberBuffer = 1024
	// How long the console waits to list again after its list or watch failed: longer each time
	// it fails again, so that a user who may list but not watch costs the API server little.
	watchRetry    = 5 * time.Second
	maxWatchRetry = 5 * time.Minute
	// maxStates is how many changes of state the console keeps per TrainJob.
	maxStates = 200
)

// summary is a TrainJob as the console's list shows it.
type summary struct {
	Key       string    `json:"key"`
	UID       string    `json:"uid"`
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	State     string    `json:"state"`
	Ready     string    `json:"ready"`
	Runtime   string    `json:"runtime"`
	Created   time.Time `json:"created"`
	Finished  bool      `json:"finished"`
	Suspended bool      `json:"suspended"`
	Queue     string    `json:"queue,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	Progress  *int32    `json:"progress,omitempty"`
	// ETA is the trainer's estimate of the seconds left, made at ReportedAt: the page counts
	// it down.
	ETA        *int32     `json:"eta,omitempty"`
	ReportedAt *time.Time `json:"reportedAt,omitempty"`
}

func summarize(tj *trainer.TrainJob) summary {
	s := summary{
		Key: tj.Namespace + "/" + tj.Name, UID: string(tj.UID), Namespace: tj.Namespace, Name: tj.Name,
		State: tj.Status.State, Ready: tj.Status.Ready, Runtime: runtimeText(tj.Spec.RuntimeRef),
		Created: tj.CreationTimestamp.Time, Finished: tj.Finished(), Suspended: ptr.Deref(tj.Spec.Suspend, false),
		Queue: tj.Labels[trainer.KueueQueueLabel],
	}
	if f := tj.Status.Failure; f != nil {
		s.Reason = f.Reason
	}
	if ts := tj.Status.TrainerStatus; ts != nil {
		s.Progress = ts.ProgressPercentage
		if !s.Finished {
			s.ETA = ts.EstimatedRemainingSeconds
		}
		if !ts.LastUpdatedTime.IsZero() {
			s.ReportedAt = ptr.To(ts.LastUpdatedTime.Time)
		}
	}
	return s
}

// point is one progress report, for the charts.
type point struct {
	Time     time.Time         `json:"time"`
	Progress *int32            `json:"progress,omitempty"`
	Metrics  map[string]string `json:"metrics,omitempty"`
}

// mark is a moment of a TrainJob's life, for its timeline.
type mark struct {
	Time time.Time `json:"time"`
	What string    `json:"what"`
}

// tracked is what the console knows of a TrainJob beyond the object: the reports and states it
// saw while it ran.
type tracked struct {
	summary summary
	history []point
	// state is the latest state seen, states the changes seen.
	state  string
	states []mark
}

// hub keeps the TrainJobs of the console's scope from one list and one watch, and sends each
// change to every browser that follows them.
type hub struct {
	mu   sync.Mutex
	jobs map[string]*tracked
	// points counts the reports kept in every TrainJob's history; floor is what shed could not
	// go below (a report each of more TrainJobs than maxPoints), which it tries again only a
	// tenth of maxPoints later.
	points, floor int
	subs          map[chan []byte]struct{}
	// problem is why the console cannot list or watch TrainJobs now, if it cannot.
	problem string
}

func newHub() *hub {
	return &hub{jobs: map[string]*tracked{}, subs: map[chan []byte]struct{}{}}
}

// run keeps the hub in step with the cluster until ctx ends; when the list or watch fails (the
// user may not list TrainJobs there, the API server is away) it says so to the browsers and
// tries again.
func (h *hub) run(ctx context.Context, c *clients, opts []client.ListOption) {
	retry := watchRetry
	for {
		began := time.Now()
		err := trainJobWatcher{listed: h.listed, changed: h.changed, watching: h.watching}.run(ctx, c, opts, true)
		if ctx.Err() != nil {
			return
		}
		h.tell(err.Error())
		if time.Since(began) > maxWatchRetry {
			retry = watchRetry // it worked for a while: a new trouble
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry):
		}
		retry = min(2*retry, maxWatchRetry)
	}
}

// watching clears the problem once a watch has begun: the console is in step again.
func (h *hub) watching() { h.tell("") }

// tell says to every browser what keeps the console from following the cluster, or that
// nothing does any longer.
func (h *hub) tell(problem string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if problem == h.problem {
		return
	}
	h.problem = problem
	h.broadcast("problem", map[string]string{"message": problem})
}

func (h *hub) listed(all []trainer.TrainJob) {
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := map[string]bool{}
	for i := range all {
		seen[h.observe(&all[i])] = true
	}
	for key := range h.jobs {
		if !seen[key] {
			h.forget(key)
		}
	}
	h.broadcast("snapshot", h.snapshotLocked())
}

func (h *hub) changed(typ watch.EventType, tj *trainer.TrainJob) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if typ == watch.Deleted {
		key := tj.Namespace + "/" + tj.Name
		h.forget(key)
		h.broadcast("delete", map[string]string{"key": key})
		return
	}
	key := h.observe(tj)
	h.broadcast("upsert", h.jobs[key].summary)
}

// observe records a TrainJob's latest state, and its new report and state if it has them.
func (h *hub) observe(tj *trainer.TrainJob) string {
	s := summarize(tj)
	t, ok := h.jobs[s.Key]
	if !ok {
		t = &tracked{}
		h.jobs[s.Key] = t
	}
	t.summary = s
	if ts := tj.Status.TrainerStatus; ts != nil && !ts.LastUpdatedTime.IsZero() &&
		(len(t.history) == 0 || t.history[len(t.history)-1].Time.Before(ts.LastUpdatedTime.Time)) {
		p := point{Time: ts.LastUpdatedTime.Time, Progress: ts.ProgressPercentage, Metrics: map[string]string{}}
		for _, m := range ts.Metrics {
			p.Metrics[m.Name] = m.Value
		}
		t.history = append(t.history, p)
		h.points++
		if len(t.history) > maxHistory {
			h.points -= len(t.history) - maxHistory
			t.history = slices.Delete(t.history, 0, len(t.history)-maxHistory)
		}
		if h.points > max(maxPoints, h.floor+maxPoints/10) {
			h.shed()
		}
	}
	// The states it goes through while the console watches; the one it was in when the console
	// first saw it is in its own times and conditions.
	if state := cmp.Or(tj.Status.State, trainer.TrainJobPending); !ok {
		t.state = state
	} else if state != t.state {
		t.state = state
		t.states = append(t.states, mark{Time: time.Now(), What: state})
		if len(t.states) > maxStates {
			t.states = slices.Delete(t.states, 0, len(t.states)-maxStates)
		}
	}
	return s.Key
}

// forget drops a TrainJob and its reports. The caller holds mu.
func (h *hub) forget(key string) {
	if t, ok := h.jobs[key]; ok {
		h.points -= len(t.history)
		delete(h.jobs, key)
	}
}

// shed drops reports until a tenth of maxPoints is free (or each TrainJob keeps one): the histories of finished TrainJobs,
// the one reported last longest ago first, then every other point of the longest history, so
// that running TrainJobs keep their whole chart, only coarser. The caller holds mu.
func (h *hub) shed() {
	goal := maxPoints * 9 / 10
	h.floor = 0
	var finished []*tracked
	for _, t := range h.jobs {
		if t.summary.Finished && len(t.history) > 0 {
			finished = append(finished, t)
		}
	}
	slices.SortFunc(finished, func(a, b *tracked) int {
		return a.history[len(a.history)-1].Time.Compare(b.history[len(b.history)-1].Time)
	})
	for _, t := range finished {
		if h.points <= goal {
			return
		}
		h.points -= len(t.history)
		t.history = nil
	}
	for h.points > goal {
		var longest *tracked
		for _, t := range h.jobs {
			if longest == nil || len(t.history) > len(longest.history) {
				longest = t
			}
		}
		if len(longest.history) <= 1 {
			h.floor = h.points // A report each: bounded by the TrainJobs themselves.
			return
		}
		kept := longest.history[:0]
		for i, p := range longest.history {
			if i%2 == 1 || i == len(longest.history)-1 {
				kept = append(kept, p)
			}
		}
		h.points -= len(longest.history) - len(kept)
		longest.history = slices.Clip(kept)
	}
}

// snapshotLocked is every TrainJob's summary, by namespace and name.
func (h *hub) snapshotLocked() map[string]any {
	items := make([]summary, 0, len(h.jobs))
	for _, t := range h.jobs {
		items = append(items, t.summary)
	}
	slices.SortFunc(items, func(a, b summary) int { return cmp.Compare(a.Key, b.Key) })
	return map[string]any{"items": items, "problem": h.problem}
}

// subscribe returns a channel of the events to send a browser, the first of them a snapshot,
// and a function that ends the subscription.
func (h *hub) subscribe() (<-chan []byte, func()) {
	ch := make(chan []byte, subscriberBuffer)
	h.mu.Lock()
	defer h.mu.Unlock()
	ch <- sseEvent("snapshot", h.snapshotLocked())
	h.subs[ch] = struct{}{}
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if _, ok := h.subs[ch]; ok {
			delete(h.subs, ch)
			close(ch)
		}
	}
}

// broadcast sends an event to every browser; one too far behind is dropped, and its
// EventSource connects again for a fresh snapshot. The caller holds mu.
func (h *hub) broadcast(event string, data any) {
	msg := sseEvent(event, data)
	for ch := range h.subs {
		select {
		case ch <- msg:
		default:
			delete(h.subs, ch)
			close(ch)
		}
	}
}

// record is what the console saw of a TrainJob while it ran: its reports and states.
func (h *hub) record(key string) (history []point, states []mark) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t, ok := h.jobs[key]; ok {
		return slices.Clone(t.history), slices.Clone(t.states)
	}
	return nil, nil
}

// sseEvent is one server-sent event of JSON data.
func sseEvent(event string, data any) []byte {
	b, err := json.Marshal(data)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"message": err.Error()})
		event = "problem"
	}
	return append(append([]byte("event: "+event+"\ndata: "), b...), '\n', '\n')
}

// timeline is a TrainJob's life: its creation, start, conditions and the states the console
// saw, in time order.
func timeline(tj *trainer.TrainJob, states []mark) []mark {
	marks := []mark{{tj.CreationTimestamp.Time, "Submitted"}}
	if t := tj.Status.StartTime; t != nil {
		marks = append(marks, mark{t.Time, "Started"})
	}
	if t := tj.Status.ReadyTime; t != nil {
		marks = append(marks, mark{t.Time, "All nodes ready"})
	}
	for _, c := range tj.Status.Conditions {
		if c.Status == metav1.ConditionTrue {
			marks = append(marks, mark{c.LastTransitionTime.Time, c.Type + " (" + c.Reason + ")"})
		}
	}
	for _, s := range states {
		marks = append(marks, mark{s.Time, "State " + s.What})
	}
	slices.SortStableFunc(marks, func(a, b mark) int { return a.Time.Compare(b.Time) })
	return marks
}
