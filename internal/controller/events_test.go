package controller

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
)

// failingSink fails its first creates with the given errors, then creates.
type failingSink struct {
	errs    []error
	creates int
}

func (s *failingSink) Create(_ context.Context, event *eventsv1.Event) (*eventsv1.Event, error) {
	s.creates++
	if s.creates <= len(s.errs) {
		return nil, s.errs[s.creates-1]
	}
	return event, nil
}

func (s *failingSink) Update(context.Context, *eventsv1.Event) (*eventsv1.Event, error) {
	return nil, errors.New("not used")
}

func (s *failingSink) Patch(context.Context, *eventsv1.Event, []byte) (*eventsv1.Event, error) {
	return nil, errors.New("not used")
}

func TestWriteEventTriesAgainOnlyWhatMaySucceed(t *testing.T) {
	saved := eventRetry
	eventRetry = wait.Backoff{Duration: time.Millisecond, Steps: 5}
	t.Cleanup(func() { eventRetry = saved })

	events := schema.GroupResource{Group: "events.k8s.io", Resource: "events"}
	lost := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	cases := map[string]struct {
		errs    []error
		creates int
	}{
		"written at once":                 {creates: 1},
		"connection lost, then written":   {errs: []error{lost, lost}, creates: 3},
		"throttled, then written":         {errs: []error{apierrors.NewTooManyRequests("slow down", 1)}, creates: 2},
		"timed out, then written":         {errs: []error{apierrors.NewServerTimeout(events, "create", 1)}, creates: 2},
		"unavailable, then written":       {errs: []error{apierrors.NewServiceUnavailable("starting")}, creates: 2},
		"refused: not tried again":        {errs: []error{apierrors.NewBadRequest("bad note")}, creates: 1},
		"forbidden: not tried again":      {errs: []error{apierrors.NewForbidden(events, "x", errors.New("no"))}, creates: 1},
		"exists already: not tried again": {errs: []error{apierrors.NewAlreadyExists(events, "x")}, creates: 1},
		"namespace gone: not tried again": {errs: []error{apierrors.NewNotFound(events, "x")}, creates: 1},
		"never reached: given up after 5": {errs: []error{lost, lost, lost, lost, lost, lost}, creates: 5},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			sink := &failingSink{errs: tc.errs}
			writeEvent(context.Background(), sink, &eventsv1.Event{}, logr.Discard())
			assert.Equal(t, tc.creates, sink.creates)
		})
	}
}

func TestWriteEventStopsWithTheManager(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	sink := &failingSink{errs: []error{context.Canceled, context.Canceled}}
	writeEvent(ctx, sink, &eventsv1.Event{}, logr.Discard())
	assert.Equal(t, 1, sink.creates)
}

// recordingSink keeps the events it was asked to create.
type recordingSink struct {
	failingSink
	created []*eventsv1.Event
}

func (s *recordingSink) Create(ctx context.Context, event *eventsv1.Event) (*eventsv1.Event, error) {
	s.created = append(s.created, event)
	return s.failingSink.Create(ctx, event)
}

func TestANoteTooLongForTheAPIServerIsCut(t *testing.T) {
	cases := map[string]struct {
		note string
		want string
	}{
		"short: as it is":              {note: "spec.trainer.numNodes: Invalid value", want: "spec.trainer.numNodes: Invalid value"},
		"exactly 1 KiB":                {note: strings.Repeat("a", 1024), want: strings.Repeat("a", 1024)},
		"long: cut at 1 KiB":           {note: "spec.x: " + strings.Repeat("b", 40000), want: "spec.x: " + strings.Repeat("b", 1024-len("spec.x: ")-3) + "..."},
		"never a character cut in two": {note: strings.Repeat("é", 2000), want: strings.Repeat("é", 510) + "..."},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			sink := &recordingSink{}
			writeEvent(context.Background(), sink, &eventsv1.Event{Note: tc.note}, logr.Discard())
			if assert.Len(t, sink.created, 1) {
				assert.Equal(t, tc.want, sink.created[0].Note)
				assert.LessOrEqual(t, len(sink.created[0].Note), 1024)
				assert.True(t, utf8.ValidString(sink.created[0].Note))
			}
		})
	}
}
