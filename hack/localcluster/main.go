// Command localcluster starts a local cluster on loopback (see testenv.WithLocalCluster: etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler with Kubernetes' own gang scheduling, the
// scheduler-plugins scheduler with Coscheduling and
// its PodGroup controller, the JobSet controller with its webhooks, KWOK faking nodes and their
// pods, and metrics-server), with the operator's CRDs and webhook configurations. It runs the command after
// "--" (the manager) against it in the foreground, serving the webhooks on loopback, and then
// applies the kustomizations given with -install. Ctrl-C stops the command, then the cluster,
// and removes the state.
//
//	go run ./hack/localcluster -install config/runtimes -- bin/manager [manager flags]
//
// With -late-build, the cluster starts without the programs a TrainJob does not need (Kueue,
// metrics-server: testenv.LatePrograms) when they are not built yet, runs the build command
// with their names, and says when each joins.
//
// The cluster's binaries come from KUBEBUILDER_ASSETS, else the repository's bin/
// (`make localcluster-assets`).
//
// With -operator (and -real-node), there is no command: the operator is installed into the
// cluster from its image, as a platform engineer installs it (testenv.InstallOperator), and runs
// there as pods of the real node (make run-installed).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/trainjob/operator/test/testenv"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "localcluster:", err)
		os.Exit(1)
	}
}

func run() error {
	var install []string
	local := testenv.DefaultLocalOptions()
	flag.IntVar(&local.Nodes, "nodes", local.Nodes, "Number of fake nodes.")
	capacity := local.NodeCapacity
	var cpu, memory, gpu string
	flag.StringVar(&cpu, "node-cpu", capacity.Cpu().String(), "CPUs of each fake node.")
	flag.StringVar(&memory, "node-memory", capacity.Memory().String(), "Memory of each fake node.")
	gpus := capacity["nvidia.com/gpu"]
	flag.StringVar(&gpu, "node-gpu", gpus.String(), "nvidia.com/gpu of each fake node.")
	flag.BoolVar(&local.RealNode, "real-node", false, "Add a real node, whose pods run real processes (needs root; make realnode-assets).")
	flag.DurationVar(&local.PodRunTime, "pod-run-time", local.PodRunTime,
		"How long a pod of a Job runs before it succeeds (the pod annotation "+testenv.RunForAnnotation+" overrides it).")
	flag.DurationVar(&local.HPASyncPeriod, "hpa-sync-period", local.HPASyncPeriod,
		"How often the HorizontalPodAutoscaler controller looks at each HPA (0: kube-controller-manager's default, 15s).")
	flag.DurationVar(&local.HPADownscaleStabilization, "hpa-downscale-stabilization", local.HPADownscaleStabilization,
		"How long an HPA waits before it scales down (0: kube-controller-manager's default, 5m).")
	flag.DurationVar(&local.MetricResolution, "metric-resolution", local.MetricResolution,
		"How often metrics-server scrapes the nodes (at least 10s). A fake node's pod uses the CPU and memory of its annotations "+
			testenv.UsageCPUAnnotation+" and "+testenv.UsageMemoryAnnotation+".")
	var lateBuild, historyBinary string
	flag.StringVar(&historyBinary, "history", "", "The history program (cmd/history) to run beside the command, recording into a SQLite file in the cluster's folder; give the manager --history too.")
	flag.StringVar(&lateBuild, "late-build", "", "A command (make -s) that builds the named programs: Kueue and metrics-server, when not built yet, join the running cluster once it has built them.")
	flag.Func("install", "A kustomization folder to apply once the manager serves; repeatable.", func(dir string) error {
		install = append(install, dir)
		return nil
	})
	var operator string
	flag.StringVar(&operator, "operator", "", "Install the operator from its image (make image) as a platform engineer does, instead of running COMMAND: "+
		testenv.InstallKustomize+" (config/default) or "+testenv.InstallHelm+" (the chart), two replicas on the real node, in namespace "+
		testenv.OperatorNamespace+" (needs -real-node).")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "Usage: localcluster [-install DIR]... -- COMMAND [ARGS...]\n       localcluster -real-node -operator kustomize|helm [-install DIR]...")
		flag.PrintDefaults()
	}
	flag.Parse()
	// envtest logs through controller-runtime, which prints a stack when no logger is set
	// within 30 s: Kueue's and metrics-server's webhooks and APIService come later than that.
	ctrllog.SetLogger(logr.Discard())
	switch {
	case operator == "" && flag.NArg() == 0:
		flag.Usage()
		return errors.New("no command to run")
	case operator != "" && flag.NArg() > 0:
		return errors.New("-operator installs the operator: there is no command to run")
	case operator != "" && !local.RealNode:
		return errors.New("-operator needs -real-node: the operator's pods run on it")
	case operator != "":
		// Its pods are in-cluster clients, from the image the real node loads.
		local.InCluster = true
		local.RealNodeImages = append(local.RealNodeImages, testenv.ManagerImageArchive)
	}

	// Only this process hears Ctrl-C: the control plane and the command run in their own process
	// groups, so they are stopped here, in order.
	// A closed terminal (SIGHUP) stops the cluster as Ctrl-C does: its programs and the late
	// build would run on, orphaned, otherwise.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()

	for _, q := range []string{cpu, memory, gpu} {
		if _, err := resource.ParseQuantity(q); err != nil {
			return fmt.Errorf("node capacity %q: %w", q, err)
		}
	}
	local.NodeCapacity = testenv.NodeCapacity(cpu, memory, gpu)
	local.Late = lateBuild != ""

	fmt.Println("Starting the local cluster on loopback...")
	started := time.Now()
	opts := []testenv.Option{testenv.WithLocalCluster(local)}
	if operator == "" {
		opts = append(opts, testenv.WithWebhooks) // For the command's webhook server, on loopback.
	}
	cluster, err := testenv.Start(opts...)
	if err != nil {
		return fmt.Errorf("starting the control plane: %w", err)
	}
	defer func() {
		fmt.Println("Stopping the cluster...")
		cluster.Stop()
	}()
	env := cluster.Env

	kubeconfig := filepath.Join(cluster.Dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		return fmt.Errorf("writing the kubeconfig: %w", err)
	}

	// The runtimes pass the operator's webhooks: install them once it serves.
	var done chan error
	var serving string
	if operator == "" {
		// The command (the manager) acts as the installed operator, with its RBAC alone.
		operatorKubeconfig, err := cluster.OperatorKubeconfig(ctx, "manager")
		if err != nil {
			return err
		}
		var cmd *exec.Cmd
		if cmd, done, err = start(operatorKubeconfig, env.WebhookInstallOptions, flag.Args()); err != nil {
			return err
		}
		defer stopCommand(cmd, done)
		webhooks := net.JoinHostPort(env.WebhookInstallOptions.LocalServingHost, strconv.Itoa(env.WebhookInstallOptions.LocalServingPort))
		if err := waitForWebhooks(ctx, webhooks, done); err != nil {
			return err
		}
		serving = "and the operator's webhooks (served at " + webhooks + ")"
		if historyBinary != "" {
			database := filepath.Join(cluster.Dir, "history.db")
			if err := cluster.StartHistory(ctx, historyBinary, database); err != nil {
				return fmt.Errorf("starting the history: %w", err)
			}
			serving += ",\nand the history (SQLite in " + database + "; kubectl trainjob history)"
		}
	} else {
		fmt.Printf("Installing the operator with %s...\n", operator)
		this, err := testenv.ThisRelease()
		if err != nil {
			return err
		}
		in, err := cluster.InstallOperator(ctx, operator, testenv.OperatorNamespace, 2, this)
		if err != nil {
			return err
		}
		if err := in.WaitReady(ctx, 5*time.Minute); err != nil {
			return err
		}
		serving = "and the operator, installed with " + operator + ": 2 replicas on the real node, in namespace " + in.Namespace
	}
	for _, dir := range install {
		if err := cluster.InstallWhenServed(ctx, dir); err != nil {
			return err
		}
	}
	assets, err := testenv.AssetsDir()
	if err != nil {
		return err
	}
	kubectl := filepath.Join(assets, "kubectl")
	fmt.Printf(`
Cluster ready in %.1f s at %s: %d fake nodes, JobSet, kube-scheduler and the Coscheduling scheduler,%s
%s.%s
  kubeconfig: %s
  logs of the cluster's programs: %s
Try, in another terminal:
  export KUBECONFIG=%s
  %s apply --server-side -f config/samples/trainer_v1alpha1_trainjob_torch.yaml
  %s get trainjobs,jobsets,jobs,pods,podgroups -w
  %s explain trainjob.spec.trainer
  %s top pods -A   # a fake node's pod uses what its annotation %s says (1m without it)
%s
`, time.Since(started).Seconds(), env.Config.Host, local.Nodes, running(cluster), serving, installed(install), kubeconfig, cluster.LogDir(), kubeconfig, kubectl, kubectl, kubectl,
		kubectl, testenv.UsageCPUAnnotation, realNode(cluster, kubectl))

	var build struct {
		cmd  *exec.Cmd
		done chan error
	}
	var building <-chan error
	if pending := cluster.Pending(); len(pending) > 0 {
		fmt.Print(pendingMessage(pending))
		if build.cmd, build.done, err = startLateBuild(lateBuild, pending); err != nil {
			return err
		}
		defer stopCommand(build.cmd, build.done)
		building = build.done
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("%s exited: %w", flag.Arg(0), err)
			}
			return nil
		case <-ctx.Done():
			return nil
		case <-tick.C:
			join(cluster, os.Stdout, started)
		case err := <-building:
			build.done <- err // Let stopCommand see the exit too.
			building = nil
			join(cluster, os.Stdout, started)
			if len(cluster.Pending()) > 0 {
				fmt.Printf("\nThe late build (%s) ended (%v) without building %s: the cluster runs without them.\n", lateBuild, err, titles(cluster.Pending()))
			}
		}
	}
}

// running lists the late programs that run in the cluster.
func running(cluster *testenv.Cluster) string {
	var s string
	for _, p := range testenv.LatePrograms {
		if !slices.ContainsFunc(cluster.Pending(), func(q testenv.LateProgram) bool { return q.Name == p.Name }) {
			s += " " + p.Title + ","
		}
	}
	return s
}

// pendingMessage says which programs are still being built, and what waits for them.
func pendingMessage(pending []testenv.LateProgram) string {
	s := "Still building, joining the cluster when built (a TrainJob needs none of them):\n"
	for _, p := range pending {
		s += fmt.Sprintf("  %s: %s wait for it.\n", p.Title, p.Waiting)
	}
	return s
}

func titles(programs []testenv.LateProgram) string {
	names := make([]string, len(programs))
	for i, p := range programs {
		names[i] = p.Title
	}
	return strings.Join(names, " and ")
}

// join starts the pending programs built since, and says so on out.
func join(cluster *testenv.Cluster, out io.Writer, started time.Time) {
	joined, err := cluster.Join()
	for _, p := range joined {
		fmt.Fprintf(out, "\n%s joined the cluster, %s after it started: %s work now.\n", p.Title, time.Since(started).Round(time.Second), p.Waiting)
	}
	if err != nil {
		fmt.Fprintf(out, "\n%v: it will not join (the logs of the cluster's programs are in %s).\n", err, cluster.LogDir())
	}
}

// startLateBuild runs the build command (words, without quoting) with the pending programs'
// names, in its own process group (stopCommand stops it), its output on ours.
func startLateBuild(command string, pending []testenv.LateProgram) (*exec.Cmd, chan error, error) {
	args := strings.Fields(command)
	for _, p := range pending {
		args = append(args, p.Name)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("starting the late build %q: %w", command, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	return cmd, done, nil
}

// start runs the command with --kubeconfig and the webhook server's address and certificate, in
// its own process group. done receives its exit.
func start(kubeconfig string, hooks envtest.WebhookInstallOptions, args []string) (*exec.Cmd, chan error, error) {
	cmd := exec.Command(args[0], append(args[1:],
		"--kubeconfig="+kubeconfig,
		"--webhook-host="+hooks.LocalServingHost,
		"--webhook-port="+strconv.Itoa(hooks.LocalServingPort),
		"--webhook-cert-path="+hooks.LocalServingCertDir,
		// The trainers report their progress to the webhook server on loopback.
		"--progress-url=https://"+net.JoinHostPort(hooks.LocalServingHost, strconv.Itoa(hooks.LocalServingPort)),
	)...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "ENABLE_WEBHOOKS=true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("starting %s: %w", args[0], err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	return cmd, done, nil
}

// stopCommand stops the command, if it still runs, and its process group, with SIGTERM
// (SIGKILL after 20 s).
func stopCommand(cmd *exec.Cmd, done chan error) {
	select {
	case err := <-done:
		done <- err
		return
	default:
	}
	fmt.Printf("\nStopping %s (pid %d)...\n", filepath.Base(cmd.Path), cmd.Process.Pid)
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// waitForWebhooks waits until the webhook server serves at addr, the command exits, or ctx ends.
func waitForWebhooks(ctx context.Context, addr string, done chan error) error {
	for !testenv.ServesTLS(addr) {
		select {
		case err := <-done:
			done <- err // Let the caller see the exit too.
			return fmt.Errorf("the manager exited before serving its webhooks: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil
}

func installed(dirs []string) string {
	if len(dirs) == 0 {
		return ""
	}
	return " Installed: " + strings.Join(dirs, ", ") + "."
}

// realNode tells how to try the real node, when the cluster has one.
func realNode(cluster *testenv.Cluster, kubectl string) string {
	if cluster.RealNodeJoined == 0 {
		return ""
	}
	return fmt.Sprintf(`The real node %q joined in %.1f s; its pods run real processes. Try:
  %s apply -f hack/localcluster/realnode-torch.yaml
  %s logs -l jobset.sigs.k8s.io/jobset-name=torch-probe
`, testenv.RealNodeName, cluster.RealNodeJoined.Seconds(), kubectl, kubectl)
}
