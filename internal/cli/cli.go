// Package cli is the kubectl plugin `kubectl trainjob`: it lists TrainJobs, describes one with
// the tree of what the operator made for it and why it is not running, follows its logs and its
// progress, suspends, resumes and reruns it. It runs on the user's machine with the user's own
// kubeconfig, so everything it reads or writes is what the user's RBAC allows, as for kubectl.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	schedulerpluginsv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	historyv1alpha1 "github.com/trainjob/operator/internal/history/apis/v1alpha1"
)

var scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(trainer.AddToScheme(scheme))
	utilruntime.Must(jobsetv1alpha2.AddToScheme(scheme))
	utilruntime.Must(schedulerpluginsv1alpha1.AddToScheme(scheme))
	utilruntime.Must(volcanov1beta1.AddToScheme(scheme))
	utilruntime.Must(historyv1alpha1.AddToScheme(scheme))
}

// Options are what every command shares: kubectl's connection flags and the streams.
type Options struct {
	genericiooptions.IOStreams
	flags *genericclioptions.ConfigFlags
}

// clients reach the cluster as the user: a typed client that also watches, and a clientset for
// what only it serves (pod logs).
type clients struct {
	client.WithWatch
	kube      kubernetes.Interface
	namespace string
}

func (o *Options) clients() (*clients, error) {
	cfg, err := o.flags.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	// kubectl's own budget: describe and the console read a TrainJob's objects and their events
	// in a few dozen small requests, which client-go's default of 5 a second would spread over
	// seconds.
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = 50, 300
	}
	ns, _, err := o.flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, err
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &clients{WithWatch: c, kube: kube, namespace: ns}, nil
}

// NewCommand is `kubectl trainjob` and its subcommands.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{IOStreams: streams, flags: genericclioptions.NewConfigFlags(true)}
	root := &cobra.Command{
		Use: "trainjob",
		// kubectl runs kubectl-trainjob as `kubectl trainjob`: the help says so.
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl trainjob"},
		Short:       "See and steer Kubeflow TrainJobs: list, describe, logs, progress, suspend, resume, rerun, history, usage",
		Long: `kubectl trainjob shows the TrainJobs of a cluster and what became of them.

It reads your kubeconfig as kubectl does, and acts with your credentials: it can see and change
what your RBAC lets you, nothing more.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	o.flags.AddFlags(root.PersistentFlags())
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	root.AddCommand(
		newListCommand(o),
		newDescribeCommand(o),
		newLogsCommand(o),
		newProgressCommand(o),
		newSuspendCommand(o, true),
		newSuspendCommand(o, false),
		newRerunCommand(o),
		newConsoleCommand(o),
		newHistoryCommand(o),
		newUsageCommand(o),
	)
	return root
}

// Main runs the plugin with args and returns its exit code: 1 after an error, which it prints
// as kubectl does. An interrupt or SIGTERM ends it.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Run(ctx, args, stdin, stdout, stderr)
}

// Run is Main until ctx ends: a program that runs the plugin in its own process (the benchmark
// runs the console) stops it so.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cmd := NewCommand(genericiooptions.IOStreams{In: stdin, Out: stdout, ErrOut: stderr})
	cmd.SetArgs(args)
	if err := cmd.ExecuteContext(ctx); err != nil {
		if !errors.Is(err, context.Canceled) {
			fmt.Fprintln(stderr, "error:", printable(err.Error()))
		}
		return 1
	}
	return 0
}

// optional turns the error of reading something the cluster may not have or the user may not
// read into a note for the output, and passes any other error on.
func optional(err error) (note string, _ error) {
	switch {
	case err == nil:
		return "", nil
	case apimeta.IsNoMatchError(err), apierrors.IsNotFound(err) && isMissingResource(err):
		return "not installed in this cluster", nil
	case apierrors.IsForbidden(err):
		return err.Error(), nil
	}
	return "", err
}

// isMissingResource tells a 404 of a whole resource (its API is not served) from one of an
// object.
func isMissingResource(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	d := status.Status().Details
	return d == nil || d.Name == ""
}
