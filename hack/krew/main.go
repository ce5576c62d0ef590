// Command krew builds the release archives of the kubectl plugin `kubectl trainjob`, one per
// platform, and writes its krew manifest (trainjob.yaml) beside them with each archive's URL and
// SHA-256, so that `kubectl krew install --manifest=trainjob.yaml --archive=<archive>` installs
// it, and a krew index can list it.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// platforms are the platforms a release serves.
var platforms = []platform{
	{"linux", "amd64"}, {"linux", "arm64"}, {"darwin", "amd64"}, {"darwin", "arm64"}, {"windows", "amd64"},
}

type platform struct{ os, arch string }

func (p platform) binary() string {
	if p.os == "windows" {
		return "kubectl-trainjob.exe"
	}
	return "kubectl-trainjob"
}

func (p platform) archive(version string) string {
	return fmt.Sprintf("kubectl-trainjob_%s_%s_%s.tar.gz", version, p.os, p.arch)
}

func main() {
	version := flag.String("version", "v0.1.0", "The release's version, semver with a leading v.")
	out := flag.String("out", "dist/krew", "Where to write the archives and the manifest.")
	baseURL := flag.String("base-url", "https://github.com/trainjob/operator/releases/download", "Where the release's archives are downloaded from; the version and archive name follow.")
	flag.Parse()
	if err := release(*version, *out, *baseURL); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func release(version, out, baseURL string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	sums := map[platform]string{}
	for _, p := range platforms {
		bin := filepath.Join(out, p.os+"-"+p.arch, p.binary())
		build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "./cmd/kubectl-trainjob")
		build.Env = append(os.Environ(), "GOOS="+p.os, "GOARCH="+p.arch, "CGO_ENABLED=0")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("building for %s/%s: %w", p.os, p.arch, err)
		}
		data, err := archive(bin)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, p.archive(version)), data, 0o644); err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		sums[p] = hex.EncodeToString(sum[:])
		fmt.Fprintf(os.Stderr, "%s  %s\n", sums[p], p.archive(version))
	}
	data, err := manifest(version, baseURL, sums)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "trainjob.yaml"), data, 0o644)
}

// archive is a gzipped tar of the binary at its top level, as krew unpacks it.
func archive(bin string) ([]byte, error) {
	f, err := os.Open(bin)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	if err := tw.WriteHeader(&tar.Header{Name: filepath.Base(bin), Mode: 0o755, Size: info.Size(), ModTime: info.ModTime()}); err != nil {
		return nil, err
	}
	if _, err := io.Copy(tw, f); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// semver is krew's rule for spec.version: semantic versioning with a leading v.
var semver = regexp.MustCompile(`^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

// manifest is the krew Plugin manifest of a release whose archives have the given SHA-256s.
func manifest(version, baseURL string, sums map[platform]string) ([]byte, error) {
	if !semver.MatchString(version) {
		return nil, fmt.Errorf("version %q: krew wants semantic versioning with a leading v, such as v0.1.0", version)
	}
	type file struct {
		From string `json:"from"`
		To   string `json:"to"`
	}
	type platformSpec struct {
		Selector map[string]map[string]string `json:"selector"`
		URI      string                       `json:"uri"`
		SHA256   string                       `json:"sha256"`
		Files    []file                       `json:"files"`
		Bin      string                       `json:"bin"`
	}
	var specs []platformSpec
	for _, p := range platforms {
		sum, ok := sums[p]
		if !ok {
			return nil, fmt.Errorf("no archive for %s/%s", p.os, p.arch)
		}
		specs = append(specs, platformSpec{
			Selector: map[string]map[string]string{"matchLabels": {"os": p.os, "arch": p.arch}},
			URI:      strings.TrimSuffix(baseURL, "/") + "/" + version + "/" + p.archive(version),
			SHA256:   sum,
			Files:    []file{{From: p.binary(), To: "."}},
			Bin:      p.binary(),
		})
	}
	return yaml.Marshal(map[string]any{
		"apiVersion": "krew.googlecontainertools.github.com/v1alpha2",
		"kind":       "Plugin",
		"metadata":   map[string]any{"name": "trainjob"},
		"spec": map[string]any{
			"version":          version,
			"homepage":         "https://github.com/trainjob/operator/blob/main/docs/console.md",
			"shortDescription": "See and steer Kubeflow TrainJobs: why they wait, logs, progress",
			"description": `kubectl trainjob lists Kubeflow Trainer TrainJobs with their state, nodes, progress and ETA;
describes one with the tree of what was made for it (JobSet, Jobs, pods, PodGroup, Kueue
Workload) and says why it is not running (Kueue's admission, a gang that waits, pods that
cannot be scheduled, images that cannot be pulled, failed initializers, failed pods with
their exit codes and last log lines); prints the logs of a rank or of all ranks; follows
its progress; suspends, resumes and reruns it. It acts with your kubeconfig's credentials.`,
			"platforms": specs,
		},
	})
}
