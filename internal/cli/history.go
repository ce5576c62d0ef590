package cli

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/controller-runtime/pkg/client"

	historyv1alpha1 "github.com/trainjob/operator/internal/history/apis/v1alpha1"
)

// historyFilters are the filters history and usage share, as the history's API takes them.
type historyFilters struct {
	allNamespaces bool
	selector      string
	state         string
	runtime       string
	creator       string
	since         string
}

func (f *historyFilters) bind(cmd *cobra.Command, since string) {
	cmd.Flags().BoolVarP(&f.allNamespaces, "all-namespaces", "A", false, "The runs of every namespace.")
	cmd.Flags().StringVarP(&f.selector, "selector", "l", "", "Only the runs of TrainJobs with these labels (e.g. -l team=vision).")
	cmd.Flags().StringVar(&f.state, "state", "", "Only the runs in this state: Complete, Failed, Running, Suspended, Created or Pending.")
	cmd.Flags().StringVar(&f.runtime, "runtime", "", "Only the runs of this runtime.")
	cmd.Flags().StringVar(&f.creator, "creator", "", "Only the runs of TrainJobs this user created.")
	cmd.Flags().StringVar(&f.since, "since", since, "Only the runs created since: a duration (24h, 30d) or a time (2026-11-01T00:00:00Z).")
}

// options are the list options of the filters, and a TrainJob's name when given.
func (f *historyFilters) options(c *clients, trainJob string) ([]client.ListOption, error) {
	sel, err := labels.Parse(f.selector)
	if err != nil {
		return nil, fmt.Errorf("-l %q: %w", f.selector, err)
	}
	fields := client.MatchingFields{}
	for field, value := range map[string]string{
		"status.state": f.state, "spec.runtime.name": f.runtime, "spec.creator": f.creator, "since": f.since, "spec.trainJobName": trainJob,
	} {
		if value != "" {
			fields[field] = value
		}
	}
	opts := []client.ListOption{client.MatchingLabelsSelector{Selector: sel}, fields, client.Limit(500)}
	if !f.allNamespaces {
		opts = append(opts, client.InNamespace(c.namespace))
	}
	return opts, nil
}

// eachRun lists the runs opts select, page by page.
func eachRun(ctx context.Context, c *clients, opts []client.ListOption, each func(*historyv1alpha1.TrainJobRun)) error {
	list := &historyv1alpha1.TrainJobRunList{}
	for {
		if err := c.List(ctx, list, opts...); err != nil {
			return historyError(err)
		}
		for i := range list.Items {
			each(&list.Items[i])
		}
		if list.Continue == "" {
			return nil
		}
		opts = append(opts, client.Continue(list.Continue))
	}
}

// historyError says what to do when the cluster does not serve the history.
func historyError(err error) error {
	if apimeta.IsNoMatchError(err) || apierrors.IsNotFound(err) && isMissingResource(err) || apierrors.IsServiceUnavailable(err) {
		return fmt.Errorf("the history is not installed in this cluster, or not running (config/history; docs/history.md): %w", err)
	}
	return err
}

func newHistoryCommand(o *Options) *cobra.Command {
	f := &historyFilters{}
	cmd := &cobra.Command{
		Use:   "history [NAME]",
		Short: "List past and present runs of TrainJobs, kept after the TrainJobs are gone; with a NAME, that TrainJob's latest run in detail",
		Example: `  kubectl trainjob history
  kubectl trainjob history -A --state Failed --since 7d
  kubectl trainjob history bert`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.clients()
			if err != nil {
				return err
			}
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			opts, err := f.options(c, name)
			if err != nil {
				return err
			}
			var runs []*historyv1alpha1.TrainJobRun
			w := printers.GetNewTabWriter(o.Out)
			now := time.Now()
			err = eachRun(cmd.Context(), c, opts, func(run *historyv1alpha1.TrainJobRun) {
				if len(runs) == 0 && name == "" {
					header := "NAME\tRUN\tSTATE\tREASON\tRUNTIME\tCREATOR\tNODES\tGPU-HOURS\tDURATION\tAGE"
					if f.allNamespaces {
						header = "NAMESPACE\t" + header
					}
					fmt.Fprintln(w, header)
				}
				runs = append(runs, run)
				if name == "" {
					row := []string{run.Spec.TrainJobName, strings.TrimPrefix(run.Name, run.Spec.TrainJobName+"."), run.Status.State,
						orNone(run.Status.Reason), run.Spec.Runtime.Name, orNone(run.Spec.Creator), fmt.Sprint(run.Spec.Nodes),
						gpuHours(run.Status.GPUSeconds), duration.HumanDuration(time.Duration(run.Status.RunningSeconds) * time.Second),
						duration.HumanDuration(now.Sub(run.CreationTimestamp.Time))}
					if f.allNamespaces {
						row = append([]string{run.Namespace}, row...)
					}
					fmt.Fprintln(w, printable(strings.Join(row, "\t")))
				}
			})
			if err != nil {
				return err
			}
			if name != "" && len(runs) > 0 {
				describeRun(w, runs[0], len(runs))
			}
			if err := w.Flush(); err != nil {
				return err
			}
			if len(runs) == 0 {
				if name != "" {
					return fmt.Errorf("the history has no run of a TrainJob %q in %s", name, c.namespace)
				}
				fmt.Fprintln(o.ErrOut, "No runs found.")
			}
			return nil
		},
	}
	f.bind(cmd, "")
	return cmd
}

// describeRun prints a run in detail: what ran, when, how it ended, and why it restarted.
func describeRun(w interface{ Write([]byte) (int, error) }, run *historyv1alpha1.TrainJobRun, runs int) {
	line := func(key, value string) {
		if value != "" {
			fmt.Fprintf(w, "%s:\t%s\n", key, printable(value))
		}
	}
	s := &run.Status
	line("Run", run.Name)
	line("Namespace", run.Namespace)
	line("UID", string(run.UID))
	if runs > 1 {
		line("Earlier runs", fmt.Sprintf("%d (kubectl trainjob history --state ... lists them; kubectl get trainjobruns)", runs-1))
	}
	line("Creator", run.Spec.Creator)
	line("Runtime", fmt.Sprintf("%s/%s %s", run.Spec.Runtime.Kind, run.Spec.Runtime.Name, run.Spec.Runtime.Digest))
	line("Framework", run.Spec.Framework)
	line("Image", run.Spec.Image)
	line("Nodes", fmt.Sprintf("%d x %d GPUs, %s processes each", run.Spec.Nodes, run.Spec.GPUsPerNode, orNone(run.Spec.ProcsPerNode)))
	line("Queue", run.Spec.Queue)
	line("Created", run.CreationTimestamp.UTC().Format(time.RFC3339))
	if s.AdmittedTime != nil {
		line("Admitted", s.AdmittedTime.UTC().Format(time.RFC3339))
	}
	if s.FirstRunningTime != nil {
		line("Running", s.FirstRunningTime.UTC().Format(time.RFC3339))
	}
	if s.FinishedTime != nil {
		line("Finished", s.FinishedTime.UTC().Format(time.RFC3339))
	}
	if s.DeletedTime != nil {
		line("Deleted", s.DeletedTime.UTC().Format(time.RFC3339))
	}
	line("State", strings.TrimSpace(s.State+" "+s.Reason))
	line("Message", s.Message)
	if f := s.Failure; f != nil {
		code := ""
		if f.ExitCode != nil {
			code = fmt.Sprintf(", exit code %d", *f.ExitCode)
		}
		line("Failure", fmt.Sprintf("pod %s on %s: %s%s %s", f.Pod, orNone(f.Node), f.Reason, code, f.Message))
	}
	if s.Restarts > 0 {
		line("Restarts", fmt.Sprint(s.Restarts))
		for _, c := range s.RestartCauses {
			line("  "+c.Time.UTC().Format(time.RFC3339), strings.TrimSpace(fmt.Sprintf("%s on %s %s", c.Reason, orNone(c.Node), c.Message)))
		}
	}
	line("Stalls", map[bool]string{true: fmt.Sprint(s.Stalls)}[s.Stalls > 0])
	line("Ran", duration.HumanDuration(time.Duration(s.RunningSeconds)*time.Second))
	line("GPU-hours", gpuHours(s.GPUSeconds))
	line("Node-hours", gpuHours(s.NodeSeconds))
	var metrics []string
	for _, m := range s.FinalMetrics {
		metrics = append(metrics, m.Name+"="+m.Value)
	}
	line("Final metrics", strings.Join(metrics, " "))
	line("Progress points", map[bool]string{true: fmt.Sprint(len(s.Progress))}[len(s.Progress) > 0])
}

func gpuHours(seconds int64) string { return fmt.Sprintf("%.1f", float64(seconds)/3600) }

func newUsageCommand(o *Options) *cobra.Command {
	f := &historyFilters{}
	by := "namespace"
	cmd := &cobra.Command{
		Use:   "usage",
		Short: "Sum what runs used: GPU-hours, node-hours, runs and failures by reason, by namespace, creator or runtime",
		Example: `  kubectl trainjob usage -A --by namespace --since 30d
  kubectl trainjob usage --by creator`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			key, ok := map[string]func(*historyv1alpha1.TrainJobRun) string{
				"namespace": func(r *historyv1alpha1.TrainJobRun) string { return r.Namespace },
				"creator":   func(r *historyv1alpha1.TrainJobRun) string { return orNone(r.Spec.Creator) },
				"runtime":   func(r *historyv1alpha1.TrainJobRun) string { return r.Spec.Runtime.Name },
			}[by]
			if !ok {
				return fmt.Errorf("--by %q: by namespace, creator or runtime", by)
			}
			c, err := o.clients()
			if err != nil {
				return err
			}
			opts, err := f.options(c, "")
			if err != nil {
				return err
			}
			type sum struct {
				runs, failed            int
				gpuSeconds, nodeSeconds int64
				reasons                 map[string]int
			}
			sums := map[string]*sum{}
			err = eachRun(cmd.Context(), c, opts, func(run *historyv1alpha1.TrainJobRun) {
				k := key(run)
				s := sums[k]
				if s == nil {
					s = &sum{reasons: map[string]int{}}
					sums[k] = s
				}
				s.runs++
				s.gpuSeconds += run.Status.GPUSeconds
				s.nodeSeconds += run.Status.NodeSeconds
				if run.Status.State == "Failed" {
					s.failed++
					s.reasons[orNone(run.Status.Reason)]++
				}
			})
			if err != nil {
				return err
			}
			if len(sums) == 0 {
				fmt.Fprintln(o.ErrOut, "No runs found.")
				return nil
			}
			keys := slices.SortedFunc(maps.Keys(sums), func(a, b string) int {
				if d := sums[b].gpuSeconds - sums[a].gpuSeconds; d != 0 {
					return int(max(-1, min(1, d)))
				}
				return strings.Compare(a, b)
			})
			w := printers.GetNewTabWriter(o.Out)
			fmt.Fprintln(w, strings.ToUpper(by)+"\tGPU-HOURS\tNODE-HOURS\tRUNS\tFAILED\tFAILURES BY REASON")
			for _, k := range keys {
				s := sums[k]
				var reasons []string
				for _, r := range slices.Sorted(maps.Keys(s.reasons)) {
					reasons = append(reasons, fmt.Sprintf("%s=%d", r, s.reasons[r]))
				}
				fmt.Fprintln(w, printable(strings.Join([]string{k, gpuHours(s.gpuSeconds), gpuHours(s.nodeSeconds),
					fmt.Sprint(s.runs), fmt.Sprint(s.failed), orNone(strings.Join(reasons, ","))}, "\t")))
			}
			return w.Flush()
		},
	}
	f.bind(cmd, "30d")
	cmd.Flags().StringVar(&by, "by", by, "What to sum by: namespace, creator or runtime.")
	return cmd
}
