package history

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
)

// Tuning of the Recorder.
const (
	// MaxBatch is the most TrainJobs the recorder writes in one transaction.
	MaxBatch = 200
	// SettleEvery is how often the record of a run that goes on is written at most (settling).
	SettleEvery = 10 * time.Second
	// ProgressEvery is how often a run's progress alone is written: a record whose other parts
	// did not change waits that long after its last write.
	ProgressEvery = time.Minute
	// releaseConcurrency is how many deleted TrainJobs the recorder releases at once, and how
	// many JobSets it reads at once.
	releaseConcurrency = 16
	// DefaultKubeAPIQPS and DefaultKubeAPIBurst are the history's requests a second to the API
	// server (cmd/history's --kube-api-qps and --kube-api-burst): client-go's 5, or
	// controller-runtime's 20, would keep 200 deletions a second waiting for their release, and
	// 200 new TrainJobs a second for the read of their JobSet.
	DefaultKubeAPIQPS   = 300
	DefaultKubeAPIBurst = 300
	// PruneEvery is how often retention runs, and the database's statistics are brought up to date.
	PruneEvery = time.Hour
	// AliveEvery is how often the recording history writes down that it records.
	AliveEvery = time.Minute
)

// Recorder writes a record of every TrainJob the manager's cache sees, as it changes, in
// batches, and removes the history's finalizer from a deleted TrainJob once its record is
// written. It runs on the leader only.
type Recorder struct {
	// Client reads TrainJobs from the cache and removes the finalizer.
	Client client.Client
	// Reader reads a TrainJob's JobSet, once, for the shape of its run.
	Reader    client.Reader
	Store     *Store
	Retention Retention
	// Frameworks tell a run's framework from its runtime's ML policy.
	Frameworks []framework.Framework
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Settle is how often the record of a run that goes on is written at most; SettleEvery when
	// zero (a test's recorder settles sooner).
	Settle time.Duration

	queue workqueue.TypedRateLimitingInterface[types.NamespacedName]
	mu    sync.Mutex
	// gone holds TrainJobs deleted without the finalizer (made before the history, or the
	// finalizer taken off) until their last state is recorded.
	gone map[types.NamespacedName][]*trainer.TrainJob
	// leading is set once this replica records: a replica that waits for the lead queues and
	// keeps nothing (it would keep every deleted TrainJob for as long as it waits).
	leading atomic.Bool
}

// SetupWithManager watches TrainJobs with the manager's cache and runs the recorder on its
// leader.
func (r *Recorder) SetupWithManager(mgr ctrl.Manager) error {
	RegisterMetrics()
	r.queue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName](),
		workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "history"})
	r.gone = map[types.NamespacedName][]*trainer.TrainJob{}
	if r.Now == nil {
		r.Now = time.Now
	}
	informer, err := mgr.GetCache().GetInformer(context.Background(), &trainer.TrainJob{})
	if err != nil {
		return err
	}
	enqueue := func(obj any) {
		if tj, ok := obj.(*trainer.TrainJob); ok && r.leading.Load() {
			r.queue.Add(client.ObjectKeyFromObject(tj))
		}
	}
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if tj, ok := obj.(*trainer.TrainJob); ok && r.leading.Load() {
				key := client.ObjectKeyFromObject(tj)
				r.mu.Lock()
				r.gone[key] = append(r.gone[key], tj)
				r.mu.Unlock()
				r.queue.Add(key)
			}
		},
	}); err != nil {
		return err
	}
	return mgr.Add(r)
}

// NeedLeaderElection makes the recorder run on the leader only.
func (r *Recorder) NeedLeaderElection() bool { return true }

// Start records until ctx ends.
func (r *Recorder) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("history")
	go func() {
		<-ctx.Done()
		r.queue.ShutDown()
	}()
	// From now on the events queue their TrainJobs; those the cache holds already are queued
	// here (a restarted recorder writes nothing for those that did not change).
	r.leading.Store(true)
	all := &trainer.TrainJobList{}
	if err := r.Client.List(ctx, all); err != nil {
		return fmt.Errorf("listing the TrainJobs to record: %w", err)
	}
	for i := range all.Items {
		r.queue.Add(client.ObjectKeyFromObject(&all.Items[i]))
	}
	lastAlive, err := r.Store.LastAlive(ctx)
	if err != nil {
		log.Error(err, "Reading when the history last recorded failed")
	}
	if err := r.endVanished(ctx, all.Items, lastAlive); err != nil {
		// Not a reason to record nothing: the next start tries again.
		log.Error(err, "Recording the deletion of TrainJobs that went while the history was away failed")
	}
	go r.prune(ctx)
	go r.heartbeat(ctx)
	for {
		key, shutdown := r.queue.Get()
		if shutdown {
			return nil
		}
		batch := []types.NamespacedName{key}
		for len(batch) < MaxBatch && r.queue.Len() > 0 {
			key, shutdown := r.queue.Get()
			if shutdown {
				break
			}
			batch = append(batch, key)
		}
		started := time.Now()
		later, failed, err := r.record(ctx, batch)
		observeBatch(started, err)
		for _, key := range batch {
			switch {
			case err != nil:
				r.queue.AddRateLimited(key)
			case failed[key] != nil:
				log.Error(failed[key], "Recording a TrainJob failed; trying again", "trainJob", key)
				r.queue.AddRateLimited(key)
			case later[key] > 0:
				r.queue.Forget(key)
				r.queue.AddAfter(key, later[key])
			default:
				r.queue.Forget(key)
			}
			r.queue.Done(key)
		}
		if err != nil {
			log.Error(err, "Recording TrainJobs failed; trying again", "trainJobs", len(batch))
		}
	}
}

// heartbeat records, every AliveEvery, that the history records: the runs of TrainJobs that go
// while it is away are counted running until then (Record.Vanished).
func (r *Recorder) heartbeat(ctx context.Context) {
	ticker := time.NewTicker(AliveEvery)
	defer ticker.Stop()
	for {
		if err := r.Store.Alive(ctx, r.Now()); err != nil && ctx.Err() == nil {
			ctrl.LoggerFrom(ctx).WithName("history").Error(err, "Recording that the history records failed")
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

func (r *Recorder) prune(ctx context.Context) {
	log := ctrl.LoggerFrom(ctx).WithName("history")
	ticker := time.NewTicker(PruneEvery)
	defer ticker.Stop()
	for {
		if r.Retention != (Retention{}) {
			n, err := r.Store.Prune(ctx, r.Retention, r.Now())
			if err != nil {
				log.Error(err, "Forgetting old runs failed")
			} else if n > 0 {
				log.Info("Forgot old runs", "runs", n)
			}
		}
		if err := r.Store.Optimize(ctx); err != nil && ctx.Err() == nil {
			log.Error(err, "Updating the database's statistics failed")
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// endVanished records the deletion of the TrainJobs whose runs the history holds as not deleted,
// but which are not among live: they went while no recorder ran, without the history's finalizer
// (made before the history was installed, or the finalizer taken off). Deleted, as far as the
// history can tell, when it came back (Record.Vanished). Each is looked for in the API server
// first: one the cache had not seen yet is not gone (one that cannot be looked for is left for
// the next start). Nothing is ended in a database that holds another cluster's runs: there,
// every run of that cluster would look gone.
func (r *Recorder) endVanished(ctx context.Context, live []trainer.TrainJob, lastAlive time.Time) error {
	log := ctrl.LoggerFrom(ctx).WithName("history")
	system := &corev1.Namespace{}
	if err := r.Reader.Get(ctx, client.ObjectKey{Name: metav1.NamespaceSystem}, system); err != nil {
		return fmt.Errorf("reading the cluster's identity (the UID of namespace %s): %w", metav1.NamespaceSystem, err)
	}
	alone, err := r.Store.ClaimCluster(ctx, string(system.UID))
	if err != nil {
		return err
	}
	if !alone {
		log.Error(nil, "The history's database holds the runs of another cluster too: give each cluster's history a database of its own. "+
			"Runs whose TrainJobs went while the history was away are not ended", "cluster", system.UID)
		return nil
	}
	undeleted, err := r.Store.Undeleted(ctx)
	if err != nil {
		return err
	}
	exists := make(map[string]bool, len(live))
	for i := range live {
		exists[string(live[i].UID)] = true
	}
	undeleted = slices.DeleteFunc(undeleted, func(uid string) bool { return exists[uid] })
	candidates, err := r.Store.GetMany(ctx, undeleted)
	if err != nil {
		return err
	}
	gone := make([]bool, len(candidates))
	var lookups errgroup.Group
	lookups.SetLimit(releaseConcurrency)
	for i, p := range candidates {
		lookups.Go(func() error {
			tj := &trainer.TrainJob{}
			err := r.Reader.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: p.Name}, tj)
			switch {
			case apierrors.IsNotFound(err), err == nil && string(tj.UID) != p.UID:
				gone[i] = true
			case err != nil:
				log.Error(err, "Looking for a TrainJob whose run is not ended failed; it is looked for again at the next start", "trainJob", klog.KRef(p.Namespace, p.Name))
			}
			return nil
		})
	}
	_ = lookups.Wait()
	now := r.Now()
	prev := map[string]*Record{}
	var writes []*Record
	for i, p := range candidates {
		if gone[i] {
			prev[p.UID] = p
			writes = append(writes, p.Vanished(now, lastAlive))
		}
	}
	written, err := r.Store.put(ctx, writes)
	if err != nil {
		return fmt.Errorf("writing the deletion of %d runs: %w", len(writes), err)
	}
	countWritten(prev, slices.DeleteFunc(writes, func(rec *Record) bool { return !written[rec.UID] }))
	if len(written) > 0 {
		log.Info("Recorded the deletion of TrainJobs that went while the history was away", "trainJobs", len(written))
	}
	return nil
}

// record writes the records of the TrainJobs of keys in one transaction, then removes the
// finalizer of those deleted. It returns the keys to look at again later (those whose progress
// alone changed since a recent write), and those that failed on their own: a TrainJob whose
// record cannot be made or written, or that cannot be released, fails alone, never its batch.
// err is a failure of the whole batch (the database or the API server away).
func (r *Recorder) record(ctx context.Context, keys []types.NamespacedName) (later map[types.NamespacedName]time.Duration, failed map[types.NamespacedName]error, err error) {
	now := r.Now()
	var seen []*trainer.TrainJob
	// taken counts the deleted TrainJobs of each key this batch records: those deleted again
	// meanwhile stay for the next.
	taken := map[types.NamespacedName]int{}
	young := map[types.NamespacedName]time.Duration{}
	for _, key := range keys {
		tj := &trainer.TrainJob{}
		err := r.Client.Get(ctx, key, tj)
		var wait time.Duration // before a new TrainJob's first record, which none has yet
		if err == nil {
			wait = settling(tj, nil, now, r.settle())
		}
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, nil, err
		case wait > 0:
			// Not yet settled, and not read from the database for nothing: a burst of new
			// TrainJobs costs the history nothing but their events until they settle.
			young[key] = wait
		default:
			seen = append(seen, tj)
		}
		r.mu.Lock()
		for _, old := range r.gone[key] {
			if err == nil && old.UID == tj.UID {
				continue // deleted and made again with the same UID: not possible, but the live one wins
			}
			old = old.DeepCopy()
			if old.DeletionTimestamp == nil {
				old.DeletionTimestamp = &metav1.Time{Time: now}
			}
			seen = append(seen, old)
		}
		taken[key] = len(r.gone[key])
		r.mu.Unlock()
	}
	uids := make([]string, len(seen))
	for i, tj := range seen {
		uids[i] = string(tj.UID)
	}
	stored, err := r.Store.GetMany(ctx, uids)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the records of %d TrainJobs: %w", len(uids), err)
	}
	prev := make(map[string]*Record, len(stored))
	for _, rec := range stored {
		prev[rec.UID] = rec
	}
	later, failed = young, map[types.NamespacedName]error{}
	var writes []*Record
	var release []*trainer.TrainJob
	same := map[string]bool{} // the UIDs whose stored record is the one they would write
	keyOf := map[string]types.NamespacedName{}
	// The shapes of those to write, read at once: a JobSet's read each, where the record has none.
	type read struct {
		wait  time.Duration // before its record is written: no shape is read then
		shape Shape
		err   error
	}
	shapes := make([]read, len(seen))
	var reads errgroup.Group
	reads.SetLimit(releaseConcurrency)
	for i, tj := range seen {
		p := prev[string(tj.UID)]
		if shapes[i].wait = settling(tj, p, now, r.settle()); shapes[i].wait <= 0 {
			reads.Go(func() error {
				shapes[i].shape, shapes[i].err = r.shape(ctx, tj, p)
				return nil
			})
		}
	}
	_ = reads.Wait()
	for i, tj := range seen {
		key := client.ObjectKeyFromObject(tj)
		keyOf[string(tj.UID)] = key
		p := prev[string(tj.UID)]
		releasing := tj.DeletionTimestamp != nil && controllerutil.ContainsFinalizer(tj, trainer.HistoryFinalizer)
		if wait := shapes[i].wait; wait > 0 {
			later[key] = wait
			continue
		}
		shape, err := shapes[i].shape, shapes[i].err
		if err != nil {
			failed[key] = err
			continue
		}
		rec := Observe(p, tj, shape, now)
		if p != nil && !rec.Observed.After(p.Observed) {
			// Later than what it replaces, whatever another replica's clock said: the store
			// keeps the latest observation.
			rec.Observed = p.Observed.Add(time.Millisecond)
		}
		if releasing {
			release = append(release, tj)
		}
		switch change := compare(p, rec); {
		case change == unchanged:
			same[string(tj.UID)] = true
		case change == progressOnly && !releasing && now.Sub(p.Observed) < ProgressEvery:
			later[client.ObjectKeyFromObject(tj)] = ProgressEvery - now.Sub(p.Observed)
		default:
			writes = append(writes, rec)
		}
	}
	written, err := r.Store.put(ctx, writes)
	if err != nil {
		// One record the database refuses must not keep the others out: each alone, then.
		if len(writes) == 1 || ctx.Err() != nil {
			return nil, nil, fmt.Errorf("writing %d records: %w", len(writes), err)
		}
		written = map[string]bool{}
		refused := 0
		for _, rec := range writes {
			one, err := r.Store.put(ctx, []*Record{rec})
			if err != nil {
				failed[keyOf[rec.UID]] = fmt.Errorf("writing its record: %w", err)
				refused++
				continue
			}
			maps.Copy(written, one)
		}
		if refused == len(writes) {
			return nil, nil, fmt.Errorf("writing %d records: %w", len(writes), err)
		}
	}
	writes = slices.DeleteFunc(writes, func(rec *Record) bool { return !written[rec.UID] })
	countWritten(prev, writes)
	// A deleted TrainJob is let go once its record is stored: written now, or unchanged. Where
	// the store kept a newer record (another replica's, as leaders changed), the TrainJob is
	// looked at again, against that record.
	for _, tj := range release {
		if key := client.ObjectKeyFromObject(tj); failed[key] == nil && !written[string(tj.UID)] && !same[string(tj.UID)] {
			failed[key] = errors.New("the history holds a newer record of it than the one written")
		}
	}
	release = slices.DeleteFunc(release, func(tj *trainer.TrainJob) bool { return failed[client.ObjectKeyFromObject(tj)] != nil })
	r.mu.Lock()
	for key, n := range taken {
		if failed[key] != nil {
			continue // its deleted TrainJobs stay for the next try
		}
		if rest := r.gone[key][n:]; len(rest) > 0 {
			r.gone[key] = rest
		} else {
			delete(r.gone, key)
		}
	}
	r.mu.Unlock()
	// The releases are a patch each, apart: several at once, or a batch of deletions would wait
	// on the API server's round trips one after another.
	var releases errgroup.Group
	releases.SetLimit(releaseConcurrency)
	releaseErrs := make([]error, len(release))
	for i, tj := range release {
		releases.Go(func() error {
			releaseErrs[i] = r.releaseTrainJob(ctx, tj)
			return nil
		})
	}
	_ = releases.Wait()
	for i, err := range releaseErrs {
		if err != nil {
			failed[client.ObjectKeyFromObject(release[i])] = err
		}
	}
	if len(writes) > 0 {
		ctrl.LoggerFrom(ctx).V(2).Info("Recorded TrainJobs", "records", len(writes), "released", len(release))
	}
	return later, failed, nil
}

func (r *Recorder) settle() time.Duration { return cmp.Or(r.Settle, SettleEvery) }

// settling is how long a TrainJob waits before its record is written: a run that goes on is
// written at most every settle, its first record settle after its creation, so that the
// changes of a start (Pending, Created, Running: a status write each, in a few seconds) come in
// one write; its end and its deletion at once. Negative or zero: now.
func settling(tj *trainer.TrainJob, prev *Record, now time.Time, settle time.Duration) time.Duration {
	if tj.DeletionTimestamp != nil || tj.Finished() {
		return 0
	}
	since := tj.CreationTimestamp.Time
	if prev != nil {
		since = prev.Observed
	}
	return since.Add(settle).Sub(now)
}

// releaseTrainJob removes the history's finalizer from a deleted TrainJob whose record is
// written. Only the finalizer: a patch with the TrainJob's resourceVersion, so that a finalizer
// another controller added meanwhile is not lost.
func (r *Recorder) releaseTrainJob(ctx context.Context, tj *trainer.TrainJob) error {
	patched := tj.DeepCopy()
	base := client.MergeFromWithOptions(tj, client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(patched, trainer.HistoryFinalizer)
	err := r.Client.Patch(ctx, patched, base)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("removing the history's finalizer from %s: %w", klog.KObj(tj), err)
	}
	return nil
}

// shape is what the record of tj reads from its JobSet: read once, while the record lacks it.
func (r *Recorder) shape(ctx context.Context, tj *trainer.TrainJob, prev *Record) (Shape, error) {
	s := Shape{}
	if tj.Status.RuntimeSnapshot != nil {
		if fw := framework.Select(r.Frameworks, framework.SnapshotPolicy(tj)); fw != nil {
			s.Framework = fw.Name()
		}
		if p := framework.SnapshotPolicy(tj); p != nil && p.Torch != nil && p.Torch.NumProcPerNode != nil {
			s.ProcsPerNode = p.Torch.NumProcPerNode.String()
		}
	}
	if prev != nil && prev.Image != "" {
		s.Image, s.GPUsPerNode, s.Nodes = prev.Image, prev.GPUsPerNode, prev.Nodes
		if s.ProcsPerNode == "" {
			s.ProcsPerNode = prev.ProcsPerNode
		}
		return s, nil
	}
	if tj.Status.ObservedGeneration == 0 {
		return s, nil // no JobSet yet
	}
	if tj.Status.ReadyTime == nil && tj.DeletionTimestamp == nil && !tj.Finished() {
		// Not run yet: nothing uses its GPUs, and a queued TrainJob may wait long. Its JobSet is
		// read once it runs, ends or goes.
		return s, nil
	}
	// From the API server's cache (resourceVersion 0), not a quorum read of etcd: a JobSet's
	// trainer is as it was made. One not there yet is read again at the next write.
	js := &jobsetv1alpha2.JobSet{}
	err := r.Reader.Get(ctx, client.ObjectKeyFromObject(tj), js, &client.GetOptions{Raw: &metav1.GetOptions{ResourceVersion: "0"}})
	if apierrors.IsNotFound(err) || err == nil && !metav1.IsControlledBy(js, tj) {
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("reading the JobSet of %s: %w", klog.KObj(tj), err)
	}
	name := framework.TrainerJobName(js)
	for i := range js.Spec.ReplicatedJobs {
		job := &js.Spec.ReplicatedJobs[i]
		if job.Name != name {
			continue
		}
		if c := trainerContainer(job.Template.Spec.Template.Spec.Containers); c != nil {
			s.Image, s.GPUsPerNode = c.Image, framework.GPUs(c)
		}
	}
	return s, nil
}

// trainerContainer is the trainer's container of a trainer job's pods: the one named "node",
// else "trainer", else the first.
func trainerContainer(containers []corev1.Container) *corev1.Container {
	for _, name := range []string{"node", "trainer"} {
		for i := range containers {
			if containers[i].Name == name {
				return &containers[i]
			}
		}
	}
	if len(containers) > 0 {
		return &containers[0]
	}
	return nil
}

type change int

const (
	changed change = iota
	unchanged
	progressOnly
)

// compare tells how a new record differs from the stored one.
func compare(stored, rec *Record) change {
	if stored == nil {
		return changed
	}
	a, b := *stored, *rec
	a.Observed, b.Observed = time.Time{}, time.Time{}
	if equalJSON(&a, &b) {
		return unchanged
	}
	a.Progress, a.FinalMetrics, b.Progress, b.FinalMetrics = nil, nil, nil, nil
	if equalJSON(&a, &b) {
		return progressOnly
	}
	return changed
}

func equalJSON(a, b *Record) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errors.Join(errA, errB) == nil && bytes.Equal(ja, jb)
}

// CacheOptions are the history's cache: TrainJobs, with what a record reads of them, and the
// Secrets of its own namespace only (its API server's certificate).
func CacheOptions(namespace string) cache.Options {
	opts := cache.Options{ByObject: map[client.Object]cache.ByObject{
		&trainer.TrainJob{}: {Transform: TrainJobTransform},
	}}
	if namespace != "" {
		opts.ByObject[&corev1.Secret{}] = cache.ByObject{Namespaces: map[string]cache.Config{namespace: {}}}
	}
	return opts
}

// TrainJobTransform keeps of a TrainJob in the recorder's cache what a record reads: its
// metadata without managed fields and annotations other than its creator, its status, and of
// its spec the runtime and the trainer's image, size and resources.
func TrainJobTransform(obj any) (any, error) {
	tj, ok := obj.(*trainer.TrainJob)
	if !ok {
		return obj, nil
	}
	tj.ManagedFields = nil
	if creator, ok := tj.Annotations[trainer.CreatorAnnotation]; ok {
		tj.Annotations = map[string]string{trainer.CreatorAnnotation: creator}
	} else {
		tj.Annotations = nil
	}
	spec := trainer.TrainJobSpec{RuntimeRef: tj.Spec.RuntimeRef, Suspend: tj.Spec.Suspend, ManagedBy: tj.Spec.ManagedBy}
	if t := tj.Spec.Trainer; t != nil {
		spec.Trainer = &trainer.Trainer{Image: t.Image, NumNodes: t.NumNodes, NumProcPerNode: t.NumProcPerNode, ResourcesPerNode: t.ResourcesPerNode}
	}
	tj.Spec = spec
	return tj, nil
}
