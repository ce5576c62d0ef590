package testing

import (
	"encoding/json"
	gotesting "testing"

	"github.com/stretchr/testify/require"
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
