package testenv

import (
	"sync"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Warnings collects the warnings the API server sends back to a client, as kubectl prints them.
type Warnings struct {
	mu    sync.Mutex
	texts []string
}

// HandleWarningHeader implements rest.WarningHandler.
func (w *Warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.texts = append(w.texts, text)
}

// Texts are the warnings collected so far.
func (w *Warnings) Texts() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.texts...)
}

// ClientWithWarnings returns a client of cfg whose warnings the returned Warnings collects.
func ClientWithWarnings(cfg *rest.Config) (client.Client, *Warnings, error) {
	w := &Warnings{}
	cfg = rest.CopyConfig(cfg)
	cfg.WarningHandler = w
	c, err := client.New(cfg, client.Options{Scheme: Scheme})
	return c, w, err
}
