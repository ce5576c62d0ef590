package testing

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	gotesting "testing"

	"github.com/stretchr/testify/require"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// FromApplyConfiguration reads an apply configuration back as the typed object the API server
// would store, so that expectations can be written as typed objects.
func FromApplyConfiguration[T any](t gotesting.TB, ac any) *T {
	t.Helper()
	data, err := json.Marshal(ac)
	require.NoError(t, err)
	obj := new(T)
	require.NoError(t, json.Unmarshal(data, obj))
	return obj
}

// ObjectsOfKind returns, as JSON, what part picks of each object of the kind in the YAML files
// (of one or more documents) that match pattern.
func ObjectsOfKind(t gotesting.TB, pattern, kind string, part func(map[string]any) any) [][]byte {
	t.Helper()
	files, err := filepath.Glob(pattern)
	require.NoError(t, err)
	var out [][]byte
	for _, file := range files {
		data, err := os.ReadFile(file)
		require.NoError(t, err)
		docs := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for {
			doc, err := docs.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err, file)
			obj := map[string]any{}
			require.NoError(t, yaml.Unmarshal(doc, &obj), file)
			if obj["kind"] != kind {
				continue
			}
			js, err := json.Marshal(part(obj))
			require.NoError(t, err)
			out = append(out, js)
		}
	}
	return out
}
