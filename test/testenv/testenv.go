// Package testenv starts a real kube-apiserver and etcd (controller-runtime's envtest) with every
// CRD the operator works with installed: its own, JobSet's and the scheduler-plugins PodGroup.
// The integration suites and `make run` share it, so both see the same cluster.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Third-party CRDs, as module path and the file or folder inside that module. The versions are the
// ones in go.mod, so the CRDs always match the Go types the operator is built with.
var thirdPartyCRDs = []struct{ module, path string }{
	{"sigs.k8s.io/jobset", "config/components/crd/bases"},
	{"sigs.k8s.io/scheduler-plugins", "manifests/coscheduling/crd.yaml"},
}

// CRDPaths returns the files and folders holding the CRDs to install: config/crd/bases of this
// repository, then the third-party ones from the Go module cache.
func CRDPaths() ([]string, error) {
	root, err := moduleDir("")
	if err != nil {
		return nil, err
	}
	paths := []string{filepath.Join(root, "config", "crd", "bases")}
	for _, crd := range thirdPartyCRDs {
		dir, err := moduleDir(crd.module)
		if err != nil {
			return nil, err
		}
		paths = append(paths, filepath.Join(dir, crd.path))
	}
	return paths, nil
}

// assetsDir is the folder with etcd, kube-apiserver and the other control-plane binaries:
// KUBEBUILDER_ASSETS, else the repository's bin/ (`make envtest-assets` builds them there).
func assetsDir() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	root, err := moduleDir("")
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin"), nil
}

// New returns an environment with all the CRDs, ready to Start, with the binaries of assetsDir.
func New() (*envtest.Environment, error) {
	paths, err := CRDPaths()
	if err != nil {
		return nil, err
	}
	assets, err := assetsDir()
	if err != nil {
		return nil, err
	}
	return &envtest.Environment{
		CRDDirectoryPaths:     paths,
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}, nil
}

// moduleDir asks the go command where a module is: the main module for "", else the module cache
// folder of the version go.mod selects.
func moduleDir(module string) (string, error) {
	args := []string{"list", "-m", "-f", "{{.Dir}}"}
	if module != "" {
		args = append(args, module)
	}
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			err = fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		return "", fmt.Errorf("locating module %q: %w", module, err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", fmt.Errorf("module %q is not in the module cache: run 'go mod download'", module)
	}
	return dir, nil
}

// StartGarbageCollector runs kube-controller-manager's garbage collector against a started
// environment, so that owner references are honoured as in a real cluster: deleting an owner
// deletes its children. The returned function stops it.
func StartGarbageCollector(env *envtest.Environment) (stop func(), err error) {
	user, err := env.AddUser(envtest.User{Name: "garbage-collector", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, fmt.Errorf("adding a user for the garbage collector: %w", err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "garbage-collector-")
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		return nil, err
	}
	assets, err := assetsDir()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(assets, "kube-controller-manager"),
		"--kubeconfig="+path, "--controllers=garbagecollector", "--leader-elect=false", "--secure-port=0", "-v=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting kube-controller-manager: %w", err)
	}
	return func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		_ = os.RemoveAll(dir)
	}, nil
}
