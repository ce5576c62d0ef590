package installed

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTheImageIsTheDockerfiles checks that `make image`, which needs no Docker, builds what the
// Dockerfile builds: the same build script, the same user, entrypoint and working directory, the
// files of the Dockerfile's distroless base that the manager uses, and nothing to run but the
// operator's programs, the manager and the history (no shell).
func TestTheImageIsTheDockerfiles(t *testing.T) {
	image := images[thisRelease.ImageArchive]
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "Dockerfile"))
	require.NoError(t, err)
	dockerfile := string(data)
	instruction := func(name string) string {
		m := regexp.MustCompile(`(?m)^`+name+` (.+)$`).FindAllStringSubmatch(dockerfile, -1)
		require.NotEmpty(t, m, "the Dockerfile has no %s", name)
		return strings.TrimSpace(m[len(m)-1][1])
	}
	assert.Contains(t, instruction("RUN"), "hack/manager-build.sh manager", "the Dockerfile builds the manager otherwise")
	assert.Contains(t, dockerfile, "hack/manager-build.sh history . ./cmd/history", "the Dockerfile builds the history otherwise")
	assert.Equal(t, "gcr.io/distroless/static:nonroot", instruction("FROM"))
	assert.Equal(t, instruction("USER"), image.User)
	assert.Equal(t, `["`+strings.Join(image.Entrypoint, `", "`)+`"]`, instruction("ENTRYPOINT"))
	assert.Equal(t, instruction("WORKDIR"), image.WorkingDir)
	// What the image's user (65532, no owner of them) must read, run or write, whatever the
	// umask of who built it.
	for file, perm := range map[string]fs.FileMode{
		"manager": 0o005, "history": 0o005, "etc/passwd": 0o004, "etc/group": 0o004, "etc/ssl/certs/ca-certificates.crt": 0o004,
		"etc": 0o005, "etc/ssl": 0o005, "etc/ssl/certs": 0o005, "tmp": fs.ModeSticky | 0o007, "home/nonroot": 0o005,
	} {
		mode, ok := image.Files[file]
		if assert.True(t, ok, "the image lacks /%s", file) {
			assert.Equal(t, perm, mode&perm, "/%s is %s", file, mode)
		}
	}
	for file := range image.Files {
		assert.NotRegexp(t, `^(bin|usr|sbin)(/|$)`, file, "the image has programs besides the manager")
	}
}
