// Command localcluster starts a local control plane (etcd and kube-apiserver from bin/, on
// loopback, state in a temporary folder), installs the operator's CRDs and the JobSet and PodGroup
// CRDs and the kustomizations given with -install, writes a kubeconfig, and runs the command after
// "--" (the manager) against it in the foreground. Ctrl-C stops the command, then the control
// plane, and removes the state.
//
//	go run ./hack/localcluster -assets bin -install config/runtimes -- bin/manager [manager flags]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trainjob/operator/test/testenv"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "localcluster:", err)
		os.Exit(1)
	}
}

func run() error {
	assets := flag.String("assets", "", "Folder with the etcd, kube-apiserver and kubectl binaries.")
	var install []string
	flag.Func("install", "A kustomization folder to apply once the control plane is up; repeatable.", func(dir string) error {
		install = append(install, dir)
		return nil
	})
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "Usage: localcluster [-assets DIR] -- COMMAND [ARGS...]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		return errors.New("no command to run")
	}

	// Only this process hears Ctrl-C: the control plane and the command run in their own process
	// groups, so they are stopped here, in order.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	env, err := testenv.New()
	if err != nil {
		return err
	}
	if *assets != "" {
		env.BinaryAssetsDirectory = *assets
	}
	fmt.Println("Starting etcd and kube-apiserver on loopback...")
	if _, err := env.Start(); err != nil {
		return fmt.Errorf("starting the control plane: %w", err)
	}
	defer func() {
		fmt.Println("Stopping the control plane...")
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "localcluster: stopping the control plane:", err)
		}
	}()

	if err := installAll(ctx, env.Config, install); err != nil {
		return err
	}

	dir, err := os.MkdirTemp("", "trainjob-localcluster-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		return fmt.Errorf("writing the kubeconfig: %w", err)
	}
	kubectl := "kubectl"
	if *assets != "" {
		kubectl = filepath.Join(*assets, "kubectl")
	}
	fmt.Printf(`
Control plane ready at %s; CRDs installed.%s
  kubeconfig: %s
Try, in another terminal:
  export KUBECONFIG=%s
  %s get trainer
  %s explain trainjob.spec.trainer

`, env.Config.Host, installed(install), kubeconfig, kubeconfig, kubectl, kubectl)

	return runCommand(ctx, kubeconfig, flag.Args())
}

// installAll applies each kustomization with server-side apply.
func installAll(ctx context.Context, cfg *rest.Config, dirs []string) error {
	if len(dirs) == 0 {
		return nil
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	for _, dir := range dirs {
		objs, err := testenv.Kustomize(dir)
		if err != nil {
			return err
		}
		if err := testenv.Apply(ctx, c, "localcluster", objs...); err != nil {
			return fmt.Errorf("installing %s: %w", dir, err)
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

// runCommand runs the command with --kubeconfig until it exits or ctx is cancelled, then stops it
// with SIGTERM (SIGKILL after 20 s). Webhooks are off: this control plane cannot call back into
// the manager.
func runCommand(ctx context.Context, kubeconfig string, args []string) error {
	cmd := exec.Command(args[0], append(args[1:], "--kubeconfig="+kubeconfig)...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "ENABLE_WEBHOOKS=false")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", args[0], err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("%s exited: %w", args[0], err)
		}
		return nil
	case <-ctx.Done():
	}
	fmt.Printf("\nStopping %s (pid %d)...\n", filepath.Base(args[0]), cmd.Process.Pid)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
	return nil
}
