package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSoftMemoryLimit(t *testing.T) {
	limit, ok := SoftMemoryLimit("1073741824") // 1Gi, as the downward API writes it.
	assert.True(t, ok)
	assert.Equal(t, int64(966367638), limit, "nine tenths")
	for _, bad := range []string{"", "1Gi", "-5", "0", "lots"} {
		_, ok := SoftMemoryLimit(bad)
		assert.False(t, ok, "%q", bad)
	}
}
