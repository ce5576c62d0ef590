package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// TestTheManifestIsOneKrewAccepts writes a manifest and checks it against the rules of krew's
// validation (sigs.k8s.io/krew pkg/index/validation): the name matches the file and krew's
// pattern, the version is semver with a leading v, a short description, and for every platform
// a URI, a SHA-256 of 64 lowercase hex digits, a binary, files to copy, and a selector on os and
// arch only; an archive holds the binary at its top, where bin and files say.
func TestTheManifestIsOneKrewAccepts(t *testing.T) {
	sums := map[platform]string{}
	for _, p := range platforms {
		sums[p] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	}
	data, err := manifest("v1.2.3", "https://example.com/dl/", sums)
	require.NoError(t, err)
	var m struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			Version          string `json:"version"`
			ShortDescription string `json:"shortDescription"`
			Description      string `json:"description"`
			Homepage         string `json:"homepage"`
			Platforms        []struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
				URI    string `json:"uri"`
				SHA256 string `json:"sha256"`
				Bin    string `json:"bin"`
				Files  []struct {
					From string `json:"from"`
					To   string `json:"to"`
				} `json:"files"`
			} `json:"platforms"`
		} `json:"spec"`
	}
	require.NoError(t, yaml.UnmarshalStrict(data, &m))
	assert.Equal(t, "krew.googlecontainertools.github.com/v1alpha2", m.APIVersion)
	assert.Equal(t, "Plugin", m.Kind)
	assert.Equal(t, "trainjob", m.Metadata.Name, "krew wants the name of the manifest's file, trainjob.yaml")
	assert.Regexp(t, `^[\w-]+$`, m.Metadata.Name)
	assert.Equal(t, "v1.2.3", m.Spec.Version)
	assert.NotEmpty(t, m.Spec.ShortDescription)
	require.Len(t, m.Spec.Platforms, len(platforms))
	hex64 := regexp.MustCompile(`^[a-f0-9]{64}$`)
	for _, p := range m.Spec.Platforms {
		assert.ElementsMatch(t, []string{"os", "arch"}, keys(p.Selector.MatchLabels))
		assert.Regexp(t, `^https://example.com/dl/v1.2.3/kubectl-trainjob_v1.2.3_\w+_\w+\.tar\.gz$`, p.URI)
		assert.Regexp(t, hex64, p.SHA256)
		require.Len(t, p.Files, 1)
		assert.Equal(t, p.Bin, p.Files[0].From)
	}

	_, err = manifest("1.2.3", "https://example.com", sums)
	assert.ErrorContains(t, err, "semantic versioning with a leading v")
	delete(sums, platforms[0])
	_, err = manifest("v1.2.3", "https://example.com", sums)
	assert.ErrorContains(t, err, "no archive for linux/amd64")
}

func keys(m map[string]string) []string {
	var k []string
	for key := range m {
		k = append(k, key)
	}
	return k
}

func TestTheArchiveHoldsTheBinaryAtItsTop(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "kubectl-trainjob")
	require.NoError(t, os.WriteFile(bin, []byte("#!/bin/sh\necho hi\n"), 0o755))
	data, err := archive(bin)
	require.NoError(t, err)
	gz, err := gzip.NewReader(bytes.NewReader(data))
	require.NoError(t, err)
	tr := tar.NewReader(gz)
	h, err := tr.Next()
	require.NoError(t, err)
	assert.Equal(t, "kubectl-trainjob", h.Name)
	assert.Equal(t, int64(0o755), h.Mode, "krew runs it: it must be executable")
	content, err := io.ReadAll(tr)
	require.NoError(t, err)
	assert.Equal(t, "#!/bin/sh\necho hi\n", string(content))
	_, err = tr.Next()
	assert.Equal(t, io.EOF, err)
}
