package cli

import (
	"cmp"
	"container/heap"
	"context"
	"encoding/json"
	"slices"
	"strings"
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
	// pageSize is how many TrainJobs a page of the list holds: a browser is sent one page, never
	// the whole scope.
	pageSize = 100
	// maxPage is the last page a stream may ask for (a hundred million TrainJobs): one past the
	// TrainJobs there are shows the last.
	maxPage = 1 << 20
	// pageInterval is the least time between two pages sent to a browser: the changes of a busy
	// cluster that come faster are sent together.
	pageInterval = 250 * time.Millisecond
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
	// text is what the list's filter looks in: the namespace, name, state, runtime and failure
	// reason, in lower case.
	text string
	// listed is the number of the last list that held it.
	listed  int
	history []point
	// state is the latest state seen, states the changes seen.
	state  string
	states []mark
}

// hub keeps the TrainJobs of the console's scope from one list and one watch, and wakes every
// browser's stream when they change; each stream then reads the page its browser shows.
type hub struct {
	mu   sync.Mutex
	jobs map[string]*tracked
	// order is every TrainJob by key, as the API server lists them.
	order []*tracked
	// lists counts the lists begun, whole is whether one was read whole: a list's end forgets
	// what it did not hold.
	lists int
	whole bool
	// points counts the reports kept in every TrainJob's history; floor is what shed could not
	// go below (a report each of more TrainJobs than maxPoints), which it tries again only a
	// tenth of maxPoints later.
	points, floor int
	// subs are the streams to wake when anything changes: a wake waits in its channel until the
	// stream reads a page, however many changes come meanwhile.
	subs map[chan struct{}]struct{}
	// problem is why the console cannot list or watch TrainJobs now, if it cannot.
	problem string
}

func newHub() *hub {
	return &hub{jobs: map[string]*tracked{}, subs: map[chan struct{}]struct{}{}}
}

// run keeps the hub in step with the cluster until ctx ends; when the list or watch fails (the
// user may not list TrainJobs there, the API server is away) it says so to the browsers and
// tries again.
func (h *hub) run(ctx context.Context, c *clients, opts []client.ListOption) {
	retry := watchRetry
	for {
		began := time.Now()
		err := trainJobWatcher{listing: h.listing, page: h.page, listed: h.listed, changed: h.changed, watching: h.watching}.run(ctx, c, opts, true)
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
	h.wake()
}

// listing begins a list: what it does not hold once read whole is forgotten, even if a list
// that failed partway held it.
func (h *hub) listing() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lists++
}

// page observes a page of a list, which pages shows at once: the first rows of 50,000 come
// before the rest are read.
func (h *hub) page(items []trainer.TrainJob) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range items {
		h.observe(&items[i]).listed = h.lists
	}
	h.wake()
}

// listed forgets what the list just read whole did not hold: it was deleted while the console
// could not watch.
func (h *hub) listed() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.whole = true
	for key, t := range h.jobs {
		if t.listed != h.lists {
			h.forget(key)
		}
	}
	h.wake()
}

func (h *hub) changed(typ watch.EventType, tj *trainer.TrainJob) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if typ == watch.Deleted {
		h.forget(tj.Namespace + "/" + tj.Name)
	} else {
		h.observe(tj)
	}
	h.wake()
}

// observe records a TrainJob's latest state, and its new report and state if it has them. The
// caller holds mu.
func (h *hub) observe(tj *trainer.TrainJob) *tracked {
	s := summarize(tj)
	t, ok := h.jobs[s.Key]
	if !ok {
		t = &tracked{}
		h.jobs[s.Key] = t
		i, _ := h.find(s.Key)
		h.order = slices.Insert(h.order, i, t) // At the end, as a list comes.
	}
	t.summary = s
	t.text = strings.ToLower(strings.Join([]string{s.Namespace, s.Name, cmp.Or(s.State, trainer.TrainJobPending), s.Runtime, s.Reason}, "\x00"))
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
	return t
}

// forget drops a TrainJob and its reports. The caller holds mu.
func (h *hub) forget(key string) {
	if t, ok := h.jobs[key]; ok {
		h.points -= len(t.history)
		delete(h.jobs, key)
		if i, found := h.find(key); found {
			h.order = slices.Delete(h.order, i, i+1)
		}
	}
}

// find is where key is in order, or would be. The caller holds mu.
func (h *hub) find(key string) (int, bool) {
	return slices.BinarySearchFunc(h.order, key, func(t *tracked, key string) int { return strings.Compare(t.summary.Key, key) })
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
	// The longest history first, from a heap: a scan of every TrainJob for each would take
	// minutes with tens of thousands running.
	longest := byLength{}
	for _, t := range h.jobs {
		if len(t.history) > 1 {
			longest = append(longest, t)
		}
	}
	heap.Init(&longest)
	for h.points > goal {
		if len(longest) == 0 {
			h.floor = h.points // A report each: bounded by the TrainJobs themselves.
			return
		}
		t := longest[0]
		kept := t.history[:0]
		for i, p := range t.history {
			if i%2 == 1 || i == len(t.history)-1 {
				kept = append(kept, p)
			}
		}
		h.points -= len(t.history) - len(kept)
		t.history = slices.Clip(kept)
		if len(t.history) > 1 {
			heap.Fix(&longest, 0)
		} else {
			heap.Pop(&longest)
		}
	}
}

// byLength is a heap of TrainJobs, the longest history on top.
type byLength []*tracked

func (b byLength) Len() int           { return len(b) }
func (b byLength) Less(i, j int) bool { return len(b[i].history) > len(b[j].history) }
func (b byLength) Swap(i, j int)      { b[i], b[j] = b[j], b[i] }
func (b *byLength) Push(x any)        { *b = append(*b, x.(*tracked)) }
func (b *byLength) Pop() any {
	old := *b
	t := old[len(old)-1]
	*b = old[:len(old)-1]
	return t
}

// view is what a browser shows: a page of the TrainJobs in state (any, when empty) whose
// namespace, name, state, runtime or failure reason holds text (lower case), and the one it
// selected.
type view struct {
	text, state string
	page        int
	selected    string
}

func (v view) matches(t *tracked) bool {
	return (v.state == "" || cmp.Or(t.summary.State, trainer.TrainJobPending) == v.state) && strings.Contains(t.text, v.text)
}

// pageView is a page of the list as a browser is sent it.
type pageView struct {
	Items []summary `json:"items"`
	// Page is the page shown: the last there is, when the one asked for is past it.
	Page int `json:"page"`
	// Matching counts the TrainJobs the filter keeps, All those of the scope.
	Matching int `json:"matching"`
	All      int `json:"all"`
	// Listing is true until the first list has been read whole.
	Listing bool   `json:"listing,omitempty"`
	Problem string `json:"problem,omitempty"`
	// Selected is the selected TrainJob's summary, wherever it is in the list; none once it is
	// gone.
	Selected *summary `json:"selected,omitempty"`
}

// show is the page a view shows now: one pass over the TrainJobs in order, two when the page
// asked for is past the last, which shows the last.
func (h *hub) show(v view) pageView {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := pageView{Items: []summary{}, Page: max(v.page, 0), All: len(h.jobs), Listing: !h.whole, Problem: h.problem}
	for {
		first := p.Page * pageSize
		p.Matching = 0
		for _, t := range h.order {
			if !v.matches(t) {
				continue
			}
			if p.Matching >= first && p.Matching < first+pageSize {
				p.Items = append(p.Items, t.summary)
			}
			p.Matching++
		}
		if len(p.Items) > 0 || p.Matching == 0 {
			break
		}
		p.Page = (p.Matching - 1) / pageSize // The last: Matching > 0.
	}
	if p.Matching == 0 {
		p.Page = 0
	}
	if t, ok := h.jobs[v.selected]; ok {
		selected := t.summary
		p.Selected = &selected
	}
	return p
}

// subscribe returns a channel that is woken when anything changes, and a function that ends the
// subscription.
func (h *hub) subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.subs[ch] = struct{}{}
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.subs, ch)
	}
}

// wake wakes every stream that is not awake already. The caller holds mu.
func (h *hub) wake() {
	for ch := range h.subs {
		select {
		case ch <- struct{}{}:
		default:
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
