package cli

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	trainer "github.com/trainjob/operator/api/v1alpha1"
)

// listPage is how many TrainJobs one request reads: a namespace of thousands is read in pages,
// as kubectl does.
const listPage = 500

// trainJobWatcher is told what a list and a watch of TrainJobs see: page gets each page of a
// list as it is read (again after the watch fell too far behind to resume), changed each change
// after.
type trainJobWatcher struct {
	// listing, if set, is told a list begins (again after one failed partway).
	listing func()
	// page is told each page of a list as it is read: a terminal or the console shows the first
	// of 50,000 TrainJobs as soon as they come.
	page func([]trainer.TrainJob)
	// listed, if set, is told when a list has been read whole: what it did not tell of is gone.
	listed  func()
	changed func(watch.EventType, *trainer.TrainJob)
	// watching, if set, is told each time a watch has begun.
	watching func()
}

// run lists the TrainJobs, a page at a time, and, with follow, watches them until ctx ends or an
// error: one list and one watch for any number of readers, never a poll. A watch the API server
// ends is resumed from the last version seen; a version too old to resume from (it keeps a few
// minutes) lists everything again.
func (w trainJobWatcher) run(ctx context.Context, c *clients, opts []client.ListOption, follow bool) error {
	version, err := w.list(ctx, c, opts)
	for err == nil && follow {
		version, err = w.follow(ctx, c, opts, version)
	}
	return err
}

func (w trainJobWatcher) list(ctx context.Context, c *clients, opts []client.ListOption) (string, error) {
	if w.listing != nil {
		w.listing()
	}
	for cont := ""; ; {
		// A list of its own for each page: a reader may keep the items, which a decoder that
		// reuses its target would overwrite with the next page's (controller-runtime's zeroes it
		// first).
		var page trainer.TrainJobList
		if err := c.List(ctx, &page, append(opts, client.Limit(listPage), client.Continue(cont))...); err != nil {
			return "", err
		}
		w.page(page.Items)
		if cont = page.Continue; cont == "" {
			if w.listed != nil {
				w.listed()
			}
			return page.ResourceVersion, nil
		}
	}
}

// follow tells each change from version on, until the watch ends, and returns the version to
// go on from.
func (w trainJobWatcher) follow(ctx context.Context, c *clients, opts []client.ListOption, version string) (string, error) {
	watcher, err := c.Watch(ctx, &trainer.TrainJobList{}, append(opts, &client.ListOptions{Raw: &metav1.ListOptions{
		ResourceVersion: version, AllowWatchBookmarks: true}})...)
	if err != nil {
		return "", err
	}
	defer watcher.Stop()
	if w.watching != nil {
		w.watching()
	}
	for {
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case e, ok := <-watcher.ResultChan():
			if !ok {
				return version, nil
			}
			switch e.Type {
			case watch.Error:
				if err := apierrors.FromObject(e.Object); apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
					return w.list(ctx, c, opts)
				}
				return "", apierrors.FromObject(e.Object)
			case watch.Bookmark:
				version = e.Object.(*trainer.TrainJob).ResourceVersion
			default:
				tj := e.Object.(*trainer.TrainJob)
				version = tj.ResourceVersion
				w.changed(e.Type, tj)
			}
		}
	}
}
