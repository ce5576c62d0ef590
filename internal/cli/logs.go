package cli

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/podfailure"
)

type logsOptions struct {
	*Options
	rank        int
	all         bool
	follow      bool
	initializer string
	container   string
	tail        int64
	// lines makes each write one whole line (the console sends each as an event).
	lines bool
	// maxRanks, if set, is how many ranks all follows: the first ones (the console's bound).
	maxRanks int
	// streams, if set, takes a slot for each of n log streams before they open (the console's
	// bound on them all), and returns the function that gives them back, or an error.
	streams func(n int) (release func(), err error)
}

func newLogsCommand(o *Options) *cobra.Command {
	l := &logsOptions{Options: o}
	cmd := &cobra.Command{
		Use:   "logs NAME",
		Short: "Print the logs of a TrainJob's node of rank 0, of another rank, of all, or of an initializer",
		Example: `  kubectl trainjob logs my-training              # rank 0
  kubectl trainjob logs my-training --rank 3 -f
  kubectl trainjob logs my-training --all         # every node, each line after its rank
  kubectl trainjob logs my-training --initializer dataset`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return l.run(cmd.Context(), args[0]) },
	}
	cmd.Flags().IntVar(&l.rank, "rank", 0, "The node whose log to print: its index in the trainer job (MPI: the launcher is rank 0).")
	cmd.Flags().BoolVar(&l.all, "all", false, "Print the log of every node, each line after [rank N].")
	cmd.Flags().BoolVarP(&l.follow, "follow", "f", false, "Keep printing the log as it grows.")
	cmd.Flags().StringVar(&l.initializer, "initializer", "", "Print an initializer's log instead: dataset or model.")
	cmd.Flags().StringVarP(&l.container, "container", "c", "", "The container whose log to print (default: the trainer's, node or trainer).")
	cmd.Flags().Int64Var(&l.tail, "tail", -1, "How many of the last lines to print; -1 prints all.")
	return cmd
}

func (l *logsOptions) run(ctx context.Context, name string) error {
	c, err := l.clients()
	if err != nil {
		return err
	}
	return l.runWith(ctx, c, name)
}

// runWith prints the logs the options ask for, of the TrainJob name in c's namespace.
func (l *logsOptions) runWith(ctx context.Context, c *clients, name string) error {
	step := trainer.AncestorTrainer
	switch l.initializer {
	case "":
	case "dataset":
		step = trainer.AncestorDatasetInitializer
	case "model":
		step = trainer.AncestorModelInitializer
	default:
		return fmt.Errorf("--initializer %q: it must be dataset or model", l.initializer)
	}
	if l.all && l.initializer != "" {
		return fmt.Errorf("--all and --initializer: an initializer has one pod, choose one of them")
	}
	ranks, err := l.await(ctx, c, name, step)
	if err != nil {
		return err
	}
	followed := []int{l.rank}
	if l.all {
		followed = sortedKeys(ranks)
	}
	followed, note := firstRanks(followed, l.maxRanks)
	if note != "" {
		fmt.Fprintln(l.ErrOut, note)
	}
	if l.streams != nil {
		release, err := l.streams(len(followed))
		if err != nil {
			return err
		}
		defer release()
	}
	if !l.all {
		return l.stream(ctx, c, ranks[l.rank], step, "", l.Out)
	}
	out := &lockedWriter{w: l.Out}
	var wg sync.WaitGroup
	errs := make([]error, len(followed))
	for i, rank := range followed {
		wg.Go(func() { errs[i] = l.stream(ctx, c, ranks[rank], step, fmt.Sprintf("[rank %d] ", rank), out) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// firstRanks is the first most of the ranks (all when most is 0), and a note saying so when
// that leaves some out.
func firstRanks(ranks []int, most int) ([]int, string) {
	if most <= 0 || len(ranks) <= most {
		return ranks, ""
	}
	return ranks[:most], fmt.Sprintf("Showing ranks %d to %d of %d: choose a rank for another", ranks[0], ranks[most-1], len(ranks))
}

// How often logs -f looks again for pods that have not started: soon at first, as a pod just
// made starts in seconds, then less and less often for one that waits (for Kueue, for a gang).
const (
	awaitFirst = time.Second
	awaitMax   = 30 * time.Second
)

// await finds the pods whose logs to print, by rank: the rank asked for, or with --all every
// rank the trainer job has. With -f it waits until they have started, as a user who follows a
// TrainJob just submitted wants, and says once what it waits for; without, it says why there
// is nothing to print.
func (l *logsOptions) await(ctx context.Context, c *clients, name, step string) (map[int]*corev1.Pod, error) {
	told := ""
	for pause := awaitFirst; ; pause = min(2*pause, awaitMax) {
		ranks, missing, err := l.find(ctx, c, name, step)
		if err != nil || missing == "" {
			return ranks, err
		}
		if !l.follow {
			return nil, errors.New(missing)
		}
		if missing != told {
			fmt.Fprintf(l.ErrOut, "Waiting: %s\n", missing)
			told = missing
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(pause):
		}
	}
}

// find reads the TrainJob's pods of the step by rank; wait says what is missing, if anything.
func (l *logsOptions) find(ctx context.Context, c *clients, name, step string) (ranks map[int]*corev1.Pod, wait string, _ error) {
	t := &tree{tj: &trainer.TrainJob{}, initializers: map[string]bool{}}
	if err := c.Get(ctx, types.NamespacedName{Namespace: c.namespace, Name: name}, t.tj); err != nil {
		return nil, "", err
	}
	if err := t.readJobSet(ctx, c); err != nil {
		return nil, "", err
	}
	if len(t.notes) > 0 {
		return nil, "", errors.New(t.notes[0])
	}
	state := orNone(t.tj.Status.State)
	if t.jobSet == nil {
		return nil, fmt.Sprintf("TrainJob %s has no JobSet yet (state %s): `kubectl trainjob describe %s` says why", name, state, name), nil
	}
	ranks = podsByRank(t.jobSet, t.pods, step)
	want := []int{l.rank}
	if l.all {
		want = make([]int, 0, rankCount(t.jobSet, step))
		for r := range cap(want) {
			want = append(want, r)
		}
	}
	for _, r := range want {
		p, ok := ranks[r]
		switch {
		case !ok && len(ranks) > 0 && !l.all:
			return nil, fmt.Sprintf("TrainJob %s has no %s pod of rank %d now; it has ranks %v", name, step, r, sortedKeys(ranks)), nil
		case !ok:
			return nil, fmt.Sprintf("TrainJob %s has no %s pod of rank %d now (state %s): `kubectl trainjob describe %s` says why", name, step, r, state, name), nil
		case !started(p, cmp.Or(l.container, logContainer(p, step))):
			return nil, fmt.Sprintf("pod %s of rank %d has not started yet (%s)", p.Name, r, podState(p)), nil
		}
	}
	return ranks, "", nil
}

// started tells whether the container has run, so that it has a log to read.
func started(p *corev1.Pod, container string) bool {
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == container {
			return s.State.Running != nil || s.State.Terminated != nil || s.LastTerminationState.Terminated != nil
		}
	}
	return false
}

// stream copies a pod's log to out, each line after prefix.
func (l *logsOptions) stream(ctx context.Context, c *clients, p *corev1.Pod, step, prefix string, out io.Writer) error {
	opts := &corev1.PodLogOptions{Container: cmp.Or(l.container, logContainer(p, step)), Follow: l.follow}
	if l.tail >= 0 {
		opts.TailLines = ptr.To(l.tail)
	}
	r, err := c.kube.CoreV1().Pods(p.Namespace).GetLogs(p.Name, opts).Stream(ctx)
	if err != nil {
		return fmt.Errorf("pod %s: %w", p.Name, err)
	}
	defer r.Close()
	if err := copyLines(out, r, prefix, l.lines); err != nil && ctx.Err() == nil {
		return fmt.Errorf("pod %s: %w", p.Name, err)
	}
	return nil
}

// maxLogLine is the longest piece of a log line copied at once: a longer line (a progress bar
// redrawn with carriage returns for an hour) is copied in pieces of this size, each after the
// prefix, never dropped.
const maxLogLine = 64 * 1024

// copyLines copies a log to out a line at a time, one write each, after prefix; the log's bytes
// as they come when there is no prefix and whole lines are not asked for, as kubectl logs does.
func copyLines(out io.Writer, r io.Reader, prefix string, lines bool) error {
	if prefix == "" && !lines {
		_, err := io.Copy(out, r)
		return err
	}
	br := bufio.NewReaderSize(r, maxLogLine)
	var carry []byte // the start of a character a piece's end cut
	partial := false // the last piece ended within its line
	for {
		slice, err := br.ReadSlice('\n')
		piece := append(carry, slice...) // a copy: slice is bufio's own buffer
		carry = nil
		if errors.Is(err, bufio.ErrBufferFull) {
			cut := len(piece)
			for i := len(piece) - 1; i >= max(len(piece)-utf8.UTFMax, 0); i-- {
				if utf8.RuneStart(piece[i]) {
					if !utf8.FullRune(piece[i:]) {
						cut = i
					}
					break
				}
			}
			piece, carry = piece[:cut], slices.Clone(piece[cut:])
		}
		if len(piece) > 0 && !(partial && string(piece) == "\n") {
			end := "\n"
			if piece[len(piece)-1] == '\n' {
				end = ""
			}
			if _, werr := fmt.Fprintf(out, "%s%s%s", prefix, piece, end); werr != nil {
				return werr
			}
		}
		partial = errors.Is(err, bufio.ErrBufferFull)
		switch {
		case partial:
		case errors.Is(err, io.EOF):
			return nil
		case err != nil:
			return err
		}
	}
}

// rankCount is how many pods the JobSet's replicated job of the ancestor step has.
func rankCount(js *jobsetv1alpha2.JobSet, step string) int {
	if rj := stepJob(js, step); rj != nil {
		return int(rj.Replicas) * perJob(rj)
	}
	return 0
}

func stepJob(js *jobsetv1alpha2.JobSet, step string) *jobsetv1alpha2.ReplicatedJob {
	for i := range js.Spec.ReplicatedJobs {
		if rj := &js.Spec.ReplicatedJobs[i]; trainer.Ancestor(rj) == step {
			return rj
		}
	}
	return nil
}

// perJob is how many pods each Job of the replicated job runs.
func perJob(rj *jobsetv1alpha2.ReplicatedJob) int {
	return int(ptr.Deref(rj.Template.Spec.Completions, ptr.Deref(rj.Template.Spec.Parallelism, 1)))
}

// podsByRank are the pods of the JobSet's replicated job of the ancestor step, by rank: the
// job's index times its pods per Job, plus the pod's index. Of several pods of one rank (a
// restart's, a Job's retry), the latest attempt's newest pod is the one.
func podsByRank(js *jobsetv1alpha2.JobSet, pods []corev1.Pod, step string) map[int]*corev1.Pod {
	rj := stepJob(js, step)
	ranks := map[int]*corev1.Pod{}
	for i := range pods {
		p := &pods[i]
		if rj == nil || p.Labels[jobsetv1alpha2.ReplicatedJobNameKey] != rj.Name || jobIndex(p) < 0 {
			continue
		}
		rank := jobIndex(p)*perJob(rj) + max(podIndex(p), 0)
		if was, ok := ranks[rank]; !ok || newer(p, was) {
			ranks[rank] = p
		}
	}
	return ranks
}

// newer tells whether pod a is of a later attempt than b, or made later in the same one.
func newer(a, b *corev1.Pod) bool {
	attempt := func(p *corev1.Pod) int {
		n, _ := strconv.Atoi(p.Labels[podfailure.RestartAttemptLabel])
		return n
	}
	if attempt(a) != attempt(b) {
		return attempt(a) > attempt(b)
	}
	return b.CreationTimestamp.Before(&a.CreationTimestamp)
}

// logContainer is the container whose log a rank's log is: the one named after the step (an
// initializer's), else the trainer's (node, or trainer), else the first.
func logContainer(p *corev1.Pod, step string) string {
	for _, name := range []string{step, "node", "trainer"} {
		if slices.ContainsFunc(p.Spec.Containers, func(c corev1.Container) bool { return c.Name == name }) {
			return name
		}
	}
	if len(p.Spec.Containers) > 0 {
		return p.Spec.Containers[0].Name
	}
	return ""
}

func sortedKeys[V any](m map[int]V) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// lockedWriter lets the streams of several pods write whole lines to one output.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}
