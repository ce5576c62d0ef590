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

// New returns an environment with all the CRDs, ready to Start. The etcd and kube-apiserver
// binaries are taken from KUBEBUILDER_ASSETS, else from the repository's bin/ (`make
// envtest-assets` builds them there).
func New() (*envtest.Environment, error) {
	paths, err := CRDPaths()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     paths,
		ErrorIfCRDPathMissing: true,
	}
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		root, err := moduleDir("")
		if err != nil {
			return nil, err
		}
		env.BinaryAssetsDirectory = filepath.Join(root, "bin")
	}
	return env, nil
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
