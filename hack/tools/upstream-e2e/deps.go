// Package upstreame2e is a build-only module for upstream Kubeflow Trainer's own end-to-end
// suite (its test/e2e package, at the version go.mod pins), compiled unmodified into a test
// binary (go test -c, hack/tools.mk) that test/e2e runs against the local cluster. This file only
// keeps the suite's imports in go.mod and go.sum, since a dependency's tests are not tidied.
package upstreame2e

import (
	_ "github.com/kubeflow/trainer/v2/pkg/util/testing"
	_ "github.com/kubeflow/trainer/v2/test/util"
	_ "github.com/onsi/ginkgo/v2"
	_ "github.com/onsi/gomega"
)
