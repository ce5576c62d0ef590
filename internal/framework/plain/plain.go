// Package plain runs TrainJobs whose runtime names no ML framework: the trainer runs as written,
// with only the TrainJob's values applied. It also owns TrainJobs whose runtime is missing, so
// that they are reported as Failed.
package plain

import (
	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/framework"
)

// Name of the framework and its controller.
const Name = "plain"

type plain struct{}

// New returns the plain framework.
func New() framework.Framework { return plain{} }

func (plain) Name() string { return Name }

// Selects runtimes without an ML framework.
func (plain) Selects(p *trainer.MLPolicy) bool {
	return p == nil || p.MLPolicySource == (trainer.MLPolicySource{})
}

// ReservedEnv is empty: plain sets no env vars.
func (plain) ReservedEnv() []string { return nil }

// Apply adds nothing: a plain runtime gets no distributed settings.
func (plain) Apply(*framework.Draft) error { return nil }
