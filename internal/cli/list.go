package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/liggitt/tabwriter"
	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainer "github.com/trainjob/operator/api/v1alpha1"
)

type listOptions struct {
	*Options
	allNamespaces bool
	selector      string
	watch         bool
}

func newListCommand(o *Options) *cobra.Command {
	l := &listOptions{Options: o}
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls", "get"},
		Short:   "List TrainJobs with their state, nodes, progress, ETA, age and runtime",
		Example: `  kubectl trainjob list
  kubectl trainjob list -A -w
  kubectl trainjob list -l team=vision`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return l.run(cmd.Context()) },
	}
	cmd.Flags().BoolVarP(&l.allNamespaces, "all-namespaces", "A", false, "List the TrainJobs of every namespace.")
	cmd.Flags().StringVarP(&l.selector, "selector", "l", "", "Only the TrainJobs with these labels (e.g. -l key1=value1,key2=value2).")
	cmd.Flags().BoolVarP(&l.watch, "watch", "w", false, "After the list, print each TrainJob again whenever it changes.")
	return cmd
}

func (l *listOptions) run(ctx context.Context) error {
	c, err := l.clients()
	if err != nil {
		return err
	}
	sel, err := labels.Parse(l.selector)
	if err != nil {
		return fmt.Errorf("-l %q: %w", l.selector, err)
	}
	opts := []client.ListOption{client.MatchingLabelsSelector{Selector: sel}}
	if !l.allNamespaces {
		opts = append(opts, client.InNamespace(c.namespace))
	}
	t := newTable(l.Out, l.allNamespaces)
	err = trainJobWatcher{
		// Each page as it comes: the first rows of a cluster's 50,000 TrainJobs show at once.
		page: func(items []trainer.TrainJob) {
			for i := range items {
				t.print(&items[i], time.Now())
			}
			_ = t.w.Flush()
		},
		changed: func(_ watch.EventType, tj *trainer.TrainJob) {
			t.print(tj, time.Now())
			_ = t.w.Flush()
		},
	}.run(ctx, c, opts, l.watch)
	if err == nil && t.rows == 0 {
		fmt.Fprintln(l.ErrOut, noTrainJobs(l.allNamespaces, c.namespace))
	}
	return err
}

func noTrainJobs(all bool, ns string) string {
	if all {
		return "No TrainJobs found."
	}
	return fmt.Sprintf("No TrainJobs found in %s namespace.", ns)
}

// table prints TrainJobs as rows under one header, as kubectl get does: each page of a list is
// flushed as it comes (a column wider on a later page widens from there on), and with a watch
// each change.
type table struct {
	w             *tabwriter.Writer
	allNamespaces bool
	rows          int
}

func newTable(out io.Writer, allNamespaces bool) *table {
	return &table{w: printers.GetNewTabWriter(out), allNamespaces: allNamespaces}
}

func (t *table) print(tj *trainer.TrainJob, now time.Time) {
	if t.rows == 0 {
		header := []string{"NAME", "STATE", "NODES", "PROGRESS", "ETA", "AGE", "RUNTIME"}
		if t.allNamespaces {
			header = append([]string{"NAMESPACE"}, header...)
		}
		fmt.Fprintln(t.w, strings.Join(header, "\t"))
	}
	t.rows++
	row := []string{tj.Name, orNone(tj.Status.State), orNone(tj.Status.Ready), orNone(progressText(tj)),
		orNone(etaText(tj, now)), age(tj.CreationTimestamp, now), runtimeText(tj.Spec.RuntimeRef)}
	if t.allNamespaces {
		row = append([]string{tj.Namespace}, row...)
	}
	fmt.Fprintln(t.w, printable(strings.Join(row, "\t")))
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func age(t metav1.Time, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

// runtimeText is the runtime's name, with its kind when it is a namespaced TrainingRuntime (a
// ClusterTrainingRuntime is the default, as in the TrainJob's RUNTIME column).
func runtimeText(r trainer.RuntimeRef) string {
	if r.Kind != nil && *r.Kind == trainer.TrainingRuntimeKind {
		return "TrainingRuntime/" + r.Name
	}
	return r.Name
}

// progressText is the trainer's last reported progress, "45%", or "" without one.
func progressText(tj *trainer.TrainJob) string {
	if s := tj.Status.TrainerStatus; s != nil && s.ProgressPercentage != nil {
		return fmt.Sprintf("%d%%", *s.ProgressPercentage)
	}
	return ""
}

// eta is how long the training has left by its trainer's estimate, counted down from when the
// trainer made it; ok is false without one, or once the TrainJob has finished.
func eta(tj *trainer.TrainJob, now time.Time) (time.Duration, bool) {
	s := tj.Status.TrainerStatus
	if s == nil || s.EstimatedRemainingSeconds == nil || tj.Finished() {
		return 0, false
	}
	left := time.Duration(*s.EstimatedRemainingSeconds) * time.Second
	if !s.LastUpdatedTime.IsZero() {
		left -= now.Sub(s.LastUpdatedTime.Time)
	}
	return max(left, 0), true
}

func etaText(tj *trainer.TrainJob, now time.Time) string {
	if left, ok := eta(tj, now); ok {
		return duration.HumanDuration(left)
	}
	return ""
}
