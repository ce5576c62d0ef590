package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A step's command that downloads, as the go command says it, and writes its programs.
// It writes them into bin only at the end, as a recipe that moves them there does.
const noisyBuild = `for m in a b c; do echo "go: downloading example.com/$m v1.0.0" >&2; done`

func TestRun(t *testing.T) {
	cases := map[string]struct {
		built    []string // in bin before the step
		plan     []string
		programs []string
		script   string
		want     []string // the lines printed
		wantExit int
	}{
		"the first step of a plan says where the output goes, and counts": {
			plan:     []string{"etcd", "kube-apiserver", "kubectl", "kueue"},
			programs: []string{"kube-apiserver", "kubectl"},
			script:   noisyBuild,
			want: []string{
				"Building 4 programs from source into BIN, the ones a cluster needs first (a first build takes 10 to 40 minutes); the go command's output goes to BIN/build-logs.",
				"[1/4] kube-apiserver               built in 0s",
				"[2/4] kubectl                      built in 0s",
			},
		},
		"a later step counts what the plan has built": {
			built:    []string{"etcd", "kube-apiserver", "kubectl"},
			plan:     []string{"etcd", "kube-apiserver", "kubectl", "kueue"},
			programs: []string{"kueue"},
			script:   noisyBuild,
			want:     []string{"[4/4] kueue                        built in 0s"},
		},
		"a versioned tool is named without its version": {
			built:    []string{"etcd"},
			plan:     []string{"controller-gen-v0.23.0"},
			programs: []string{"controller-gen-v0.23.0"},
			script:   noisyBuild,
			want:     []string{"[1/1] controller-gen               built in 0s"},
		},
		"the count is as wide as the plan's size": {
			built:    []string{"etcd"},
			plan:     []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "kueue"},
			programs: []string{"kueue"},
			script:   noisyBuild,
			want:     []string{"[ 1/10] kueue                        built in 0s"},
		},
		"a program outside the plan has no count": {
			built:    []string{"etcd"},
			programs: []string{"manager"},
			script:   noisyBuild,
			want:     []string{"manager                      built in 0s"},
		},
		"a failure shows the command and the log's tail": {
			built:    []string{"etcd"},
			plan:     []string{"kueue"},
			programs: []string{"kueue"},
			script:   `echo "go: downloading example.com/a v1.0.0" >&2; echo "main.go:3: undefined: x" >&2; exit 3`,
			want: []string{
				"kueue failed after 0s (exit status 3). The command, in WD:",
				`  sh -c ` + `echo "go: downloading example.com/a v1.0.0" >&2; echo "main.go:3: undefined: x" >&2; exit 3 sh kueue`,
				"The last lines of its log, BIN/build-logs/kueue.log:",
				"  # in WD",
				`  $ sh -c echo "go: downloading example.com/a v1.0.0" >&2; echo "main.go:3: undefined: x" >&2; exit 3 sh kueue`,
				"  go: downloading example.com/a v1.0.0",
				"  main.go:3: undefined: x",
			},
			wantExit: 3,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			bin := t.TempDir()
			if len(tc.built) > 0 {
				// A bin folder where something was built before has its logs folder.
				require.NoError(t, os.Mkdir(filepath.Join(bin, LogDir), 0o755))
			}
			for _, p := range tc.built {
				require.NoError(t, os.WriteFile(filepath.Join(bin, p), nil, 0o755))
			}
			t.Chdir(bin)
			var out bytes.Buffer
			err := Step{Bin: bin, Programs: tc.programs, Plan: tc.plan,
				Command: append([]string{"sh", "-c", tc.script, "sh"}, tc.programs...)}.Run(&out)

			if tc.wantExit != 0 {
				var exit *exec.ExitError
				require.True(t, errors.As(err, &exit), "want an exit error, got %v", err)
				assert.Equal(t, tc.wantExit, exit.ExitCode())
			} else {
				require.NoError(t, err)
				assert.NotContains(t, out.String(), "go: downloading", "the downloads are folded into the log")
				log, err := os.ReadFile(filepath.Join(bin, LogDir, Name(tc.programs[0])+".log"))
				require.NoError(t, err)
				assert.Contains(t, string(log), "go: downloading example.com/c v1.0.0", "the log keeps the go command's output")
			}
			got := strings.NewReplacer(bin, "BIN").Replace(out.String())
			got = strings.ReplaceAll(got, "in BIN:", "in WD:")
			got = strings.ReplaceAll(got, "# in BIN", "# in WD")
			assert.Equal(t, tc.want, strings.Split(strings.TrimRight(got, "\n"), "\n"))
		})
	}
}
