package cli

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/moby/term"
	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainer "github.com/trainjob/operator/api/v1alpha1"
)

// barWidth is how many characters the progress bar spans.
const barWidth = 30

type progressOptions struct {
	*Options
	once bool
}

func newProgressCommand(o *Options) *cobra.Command {
	p := &progressOptions{Options: o}
	cmd := &cobra.Command{
		Use:   "progress NAME",
		Short: "Follow a TrainJob's progress: a bar, its ETA and the metrics its trainer reports, until it finishes",
		Long: `progress shows what a TrainJob's trainer last reported (docs/progress.md): a progress bar, the
estimated time left, counted down between reports, and its metrics. It follows the TrainJob until it
finishes; on a terminal it redraws one line, elsewhere it prints a line per change.`,
		Example: "  kubectl trainjob progress my-training",
		Args:    cobra.ExactArgs(1),
		RunE:    func(cmd *cobra.Command, args []string) error { return p.run(cmd.Context(), args[0]) },
	}
	cmd.Flags().BoolVar(&p.once, "once", false, "Print the progress once and exit.")
	return cmd
}

func (p *progressOptions) run(ctx context.Context, name string) error {
	c, err := p.clients()
	if err != nil {
		return err
	}
	_, tty := term.GetFdInfo(p.Out)
	show := p.printer(tty)
	for {
		tj := &trainer.TrainJob{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: c.namespace, Name: name}, tj); err != nil {
			return err
		}
		show(tj, time.Now())
		if p.once || tj.Finished() {
			return p.end(tj, tty)
		}
		if tj, err = p.follow(ctx, c, tj, show, tty); err != nil || tj != nil {
			return cmp.Or(err, p.end(tj, tty))
		}
		// The API server ends watches now and then: read it again and go on.
	}
}

// follow shows each change of the TrainJob until it finishes, is deleted or the user stops;
// then it returns the TrainJob as last seen. It returns nil when the watch ends first.
func (p *progressOptions) follow(ctx context.Context, c *clients, tj *trainer.TrainJob, show func(*trainer.TrainJob, time.Time), tty bool) (*trainer.TrainJob, error) {
	w, err := c.Watch(ctx, &trainer.TrainJobList{}, client.InNamespace(tj.Namespace),
		client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", tj.Name)},
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: tj.ResourceVersion}})
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return tj, nil
		case <-tick.C:
			if tty {
				show(tj, time.Now()) // the ETA counts down between reports
			}
		case e, ok := <-w.ResultChan():
			switch {
			case !ok:
				return nil, nil
			case e.Type == watch.Deleted:
				return tj, nil
			case e.Type == watch.Modified || e.Type == watch.Added:
				tj = e.Object.(*trainer.TrainJob)
				show(tj, time.Now())
				if tj.Finished() {
					return tj, nil
				}
			}
		}
	}
}

// printer shows a progress line: redrawn in place on a terminal, else printed when it changes.
func (p *progressOptions) printer(tty bool) func(*trainer.TrainJob, time.Time) {
	last := ""
	return func(tj *trainer.TrainJob, now time.Time) {
		line := printable(tj.Name + " " + progressLine(tj, now))
		switch {
		case tty:
			fmt.Fprintf(p.Out, "\r\033[K%s", line)
		case line != last:
			fmt.Fprintln(p.Out, line)
		}
		last = line
	}
}

func (p *progressOptions) end(tj *trainer.TrainJob, tty bool) error {
	if tty {
		fmt.Fprintln(p.Out)
	}
	if c := tj.FinishedCondition(); c != nil {
		fmt.Fprintln(p.Out, printable(fmt.Sprintf("%s %s: %s", tj.Name, c.Type, firstLine(c.Message))))
	}
	return nil
}

// progressLine is a TrainJob's progress in one line: its bar, percentage, ETA, metrics, state
// and how old the report is.
func progressLine(tj *trainer.TrainJob, now time.Time) string {
	s := tj.Status.TrainerStatus
	if s == nil || (s.ProgressPercentage == nil && s.EstimatedRemainingSeconds == nil && len(s.Metrics) == 0) {
		return fmt.Sprintf("no progress reported yet (%s)", orNone(tj.Status.State))
	}
	parts := []string{}
	if s.ProgressPercentage != nil {
		parts = append(parts, bar(int(*s.ProgressPercentage)), fmt.Sprintf("%3d%%", *s.ProgressPercentage))
	}
	if left, ok := eta(tj, now); ok {
		parts = append(parts, "ETA "+duration.HumanDuration(left))
	}
	for _, m := range s.Metrics {
		parts = append(parts, m.Name+"="+m.Value)
	}
	state := orNone(tj.Status.State)
	if !s.LastUpdatedTime.IsZero() {
		state += ", reported " + duration.HumanDuration(now.Sub(s.LastUpdatedTime.Time)) + " ago"
	}
	return fmt.Sprintf("%s (%s)", strings.Join(parts, "  "), state)
}

// bar draws percent of barWidth.
func bar(percent int) string {
	done := min(max(percent, 0), 100) * barWidth / 100
	return "[" + strings.Repeat("█", done) + strings.Repeat("░", barWidth-done) + "]"
}
