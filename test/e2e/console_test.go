package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
	"github.com/trainjob/operator/test/testenv"
)

// screenshotsEnv names a folder to keep the console's screenshots in (make console-screenshots
// writes docs/images); without it they go to the test's temporary folder.
const screenshotsEnv = "CONSOLE_SCREENSHOTS"

// browsers are Debian's Chromium packages, the headless shell first: it starts faster.
var browsers = []string{"/usr/bin/chromium-headless-shell", "/usr/bin/chromium"}

// browser starts a headless Chromium for the test and returns a context of a tab in it.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := ""
	for _, b := range browsers {
		if _, err := os.Stat(b); err == nil {
			path = b
			break
		}
	}
	require.NotEmpty(t, path, "no Chromium: install Debian's chromium-headless-shell (hack/realnode-deps.sh does)")
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.WindowSize(1440, 1000),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-component-update", true))
	allocator, cancelAllocator := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocator)
	t.Cleanup(func() { cancel(); cancelAllocator() })
	require.NoError(t, chromedp.Do(ctx)) // starts the browser, which this context owns
	return ctx
}

// newTab opens another tab of the browser of ctx.
func newTab(t *testing.T, ctx context.Context) context.Context {
	tab, cancel := chromedp.NewContext(ctx)
	t.Cleanup(cancel)
	require.NoError(t, chromedp.Do(tab)) // opens the tab, which this context owns: no timeout on it
	return tab
}

// read runs a browser action that returns something, bounded as within is.
func read[T any](t *testing.T, ctx context.Context, what string, action chromedp.Action[T]) T {
	t.Helper()
	step, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	v, err := chromedp.Run(step, action)
	require.NoError(t, err, what)
	return v
}

// consoleURL starts `kubectl trainjob console` as the kubeconfig's user and returns the URL it
// prints, token and all.
func consoleURL(t *testing.T, kubeconfig, ns string, args ...string) string {
	t.Helper()
	out := background(t, kubeconfig, ns, append([]string{"console"}, args...)...)
	var url string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		url = regexp.MustCompile(`http://127\.0\.0\.1:\d+/s/\S+/`).FindString(out())
		assert.NotEmpty(c, url, "the console printed no URL: %q", out())
	}, timeout, interval)
	return url
}

// within bounds a browser step, so that a page that never shows what is awaited fails the test
// instead of hanging it.
func within(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	step, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	require.NoError(t, chromedp.Do(step, steps...), what)
}

// poll waits until a JavaScript expression is true in the page; when it never is, the test
// shows what the page said.
func poll(t *testing.T, ctx context.Context, what, expression string) {
	t.Helper()
	step, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := chromedp.Do(step, chromedp.Poll[chromedp.Void](expression, chromedp.WithPollingTimeout(timeout))); err != nil {
		last, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		text, _ := chromedp.Run(last, chromedp.Evaluate[string](`document.body.innerText.slice(0, 3000)`))
		t.Fatalf("%s: %v; the page says:\n%s", what, err, text)
	}
}

func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv(screenshotsEnv)
	if dir == "" {
		dir = t.TempDir()
	} else if !filepath.IsAbs(dir) {
		dir = filepath.Join("..", "..", dir) // the tests run in test/e2e
	}
	png := read(t, ctx, "a screenshot", chromedp.FullScreenshot(100))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), png, 0o644))
}

func row(ns, name string) string { return fmt.Sprintf(`#list tbody tr[data-key="%s/%s"]`, ns, name) }

// TestTheConsoleShowsTrainJobsLive drives the web console in Debian's headless Chromium, as a
// user would, against the local cluster: the list shows the namespace's TrainJobs as they come;
// a TrainJob whose trainer reports progress moves its bar and grows its charts; a rank's log
// streams while the pod runs; suspend, confirmed, suspends the JobSet; a user who may only read
// TrainJobs is refused, with the API server's reason, on the page.
func TestTheConsoleShowsTrainJobsLive(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	kubeconfig := adminKubeconfig(t)
	createRuntime(t, ns, "plain", utiltesting.MakeRuntimeSpec().ReplicatedJobs(nodeJob("100m")).Obj())
	job := nodeJob("10m")
	pod := &job.Template.Spec.Template.Spec
	testenv.RealNodePod(pod)
	pod.Containers[0].Image = testenv.MPIImage
	pod.Containers[0].Command = []string{"sh", "-c", `for i in $(seq 1 60); do echo "line $i of rank $JOB_COMPLETION_INDEX"; sleep 0.5; done`}
	createRuntime(t, ns, "chatty", utiltesting.MakeRuntimeSpec().ReplicatedJobs(job).Obj())

	page := browser(t)
	url := consoleURL(t, kubeconfig, ns)
	within(t, page, "the console's page opens", chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("#list")))
	poll(t, page, "the console is live", `document.getElementById('connection').textContent === 'live'`)

	// TrainJobs show up as they are created.
	reporting := runningTrainJob(t, ns, "reporting", "plain")
	long := runningTrainJob(t, ns, "long", "plain")
	chatty := createTrainJob(t, ns, "chatty", "chatty", func(w *utiltesting.TrainJobWrapper) { w.NumNodes(2) })
	explainOnFailure(t, chatty)
	for _, name := range []string{"reporting", "long", "chatty"} {
		within(t, page, name+" is listed", chromedp.WaitVisible(chromedp.CSS(row(ns, name))))
	}
	poll(t, page, "the list shows each state", fmt.Sprintf(`document.querySelector('%s').textContent.includes('Running')`, row(ns, "long")))

	// Progress moves the bar, and each report adds to the charts.
	within(t, page, "select reporting", chromedp.Click(chromedp.CSS(row(ns, "reporting"))))
	trainerSide, token := trainerOf(t, reporting)
	for _, percent := range []int{20, 45, 70} {
		require.Equal(t, http.StatusOK, trainerSide.post(t, token, report(percent)))
		poll(t, page, fmt.Sprintf("the bar shows %d%%", percent), fmt.Sprintf(
			`document.querySelector('#d-progress .bar-fill').style.width === '%d%%' && document.querySelector('#d-progress .pct').textContent === '%d%%'`, percent, percent))
		time.Sleep(time.Second) // the progress endpoint writes at most a report a second
	}
	poll(t, page, "the loss chart has every report", `(() => { const f = document.querySelector('figure[data-metric="loss"]'); return f && f.dataset.points === '3'; })()`)
	poll(t, page, "the list's row shows the progress", fmt.Sprintf(`document.querySelector('%s .progress-cell').textContent.includes('70%%')`, row(ns, "reporting")))
	screenshot(t, page, "console-progress.png")

	// A rank's log streams while its pod runs.
	within(t, page, "select chatty", chromedp.Click(chromedp.CSS(row(ns, "chatty"))))
	poll(t, page, "rank 0's log shows", `document.getElementById('d-logs').textContent.includes('line 1 of rank 0')`)
	first := read(t, page, "the log so far", chromedp.Text(chromedp.ID("d-logs")))
	require.NotContains(t, first, "line 60 of rank 0", "the pod finished before the log was opened: nothing to stream")
	poll(t, page, "the lines come as the pod writes them, to its last", `document.getElementById('d-logs').textContent.includes('line 60 of rank 0')`)
	within(t, page, "choose rank 1", chromedp.SetValue(chromedp.ID("log-source"), "rank=1"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('log-source').dispatchEvent(new Event('change'))`))
	poll(t, page, "rank 1's log streams", `document.getElementById('d-logs').textContent.includes('of rank 1') && !document.getElementById('d-logs').textContent.includes('of rank 0')`)
	screenshot(t, page, "console-logs.png")

	// Suspend, from the page, after a confirmation.
	within(t, page, "select long", chromedp.Click(chromedp.CSS(row(ns, "long"))),
		chromedp.Click(chromedp.ID("action-suspend")), chromedp.WaitVisible(chromedp.ID("confirm")))
	confirmText := read(t, page, "the confirmation", chromedp.Text(chromedp.ID("confirm-text")))
	assert.Contains(t, confirmText, "Suspend long in namespace "+ns+"?", "the confirmation names what it acts on")
	within(t, page, "confirm", chromedp.Click(chromedp.ID("confirm-yes")))
	poll(t, page, "the page says it is done", `document.getElementById('action-message').textContent === 'trainjob.trainer.kubeflow.org/long suspended'`)
	js := &jobsetv1alpha2.JobSet{}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, k8sClient.Get(ctx, client.ObjectKeyFromObject(long), js))
		assert.True(c, ptr.Deref(js.Spec.Suspend, false), "the JobSet is not suspended")
	}, timeout, interval)
	poll(t, page, "the page shows it suspended", `document.getElementById('d-state').textContent === 'Suspended'`)

	// A user who may only read: the page shows the TrainJobs, and the API server's refusal.
	viewer := newTab(t, page)
	within(t, viewer, "the viewer's console opens", chromedp.Navigate(consoleURL(t, viewerKubeconfig(t, ns), ns)),
		chromedp.WaitVisible(chromedp.CSS(row(ns, "long"))), chromedp.Click(chromedp.CSS(row(ns, "long"))),
		chromedp.Click(chromedp.ID("action-resume")), chromedp.WaitVisible(chromedp.ID("confirm")), chromedp.Click(chromedp.ID("confirm-yes")))
	poll(t, viewer, "the page says why it was refused", `document.getElementById('action-message').className === 'refused'`)
	refused := read(t, viewer, "the refusal", chromedp.Text(chromedp.ID("action-message")))
	assert.Contains(t, refused, "Refused (403)")
	assert.Contains(t, refused, `cannot patch resource "trainjobs"`)
	screenshot(t, viewer, "console-refused.png")
	assert.True(t, suspended(t, long), "the viewer resumed the TrainJob")
}

// TestTheConsoleListsAThousandTrainJobs opens the console on a namespace of 1,000 TrainJobs:
// the first page of the list shows 100 of them, the pager the rest, and the filter finds one;
// the page holds only the rows it shows, and still follows the selected TrainJob the filter
// hides.
// The time from the page's request to the first rows is logged (docs/console.md): a speed
// target is judged by measurements, not by a test.
func TestTheConsoleListsAThousandTrainJobs(t *testing.T) {
	ns := newNamespace(t)
	const n = 1000
	// MultiKueue's TrainJobs: the operator makes nothing for them, so the cluster stays idle.
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				tj := utiltesting.MakeTrainJob(fmt.Sprintf("tj-%04d", i), ns).RuntimeRef(trainer.ClusterTrainingRuntimeKind, "torch-distributed").
					ManagedBy(trainer.MultiKueueControllerName).Obj()
				if err := k8sClient.Create(context.Background(), tj); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	page := browser(t)
	url := consoleURL(t, adminKubeconfig(t), ns)
	start := time.Now()
	within(t, page, "the first rows show", chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS(row(ns, "tj-0000"))))
	t.Logf("First paint of %d TrainJobs: %s", n, time.Since(start).Round(time.Millisecond))
	poll(t, page, "the count", fmt.Sprintf(`document.getElementById('count').textContent === '%d TrainJobs'`, n))
	rows := read(t, page, "the rows", chromedp.Evaluate[int](`document.querySelectorAll('#list tbody tr').length`))
	assert.Equal(t, 100, rows, "a page holds 100 rows")
	info := read(t, page, "the pager", chromedp.Text(chromedp.ID("page-info")))
	assert.Equal(t, "1–100 of 1000", info)
	within(t, page, "the last page", chromedp.Click(chromedp.ID("next")), chromedp.Click(chromedp.ID("next")),
		chromedp.WaitVisible(chromedp.CSS(row(ns, "tj-0299"))))
	within(t, page, "select one on the last page", chromedp.Click(chromedp.CSS(row(ns, "tj-0250"))))
	asked := time.Now()
	within(t, page, "filter", chromedp.SendKeys(chromedp.ID("filter"), "tj-0999"), chromedp.WaitVisible(chromedp.CSS(row(ns, "tj-0999"))))
	t.Logf("A filter answered in %s", time.Since(asked).Round(time.Millisecond))
	poll(t, page, "the filter keeps one", `document.querySelectorAll('#list tbody tr').length === 1 && document.getElementById('page-info').textContent === '1–1 of 1'`)
	assert.Equal(t, 1, read(t, page, "what the page holds", chromedp.Evaluate[int](`state.list.items.length`)),
		"the page holds the rows it shows, not every TrainJob")
	assert.Equal(t, "tj-0250", read(t, page, "the selected TrainJob", chromedp.Text(chromedp.ID("d-name"))), "the selected TrainJob was let go when the filter hid its row")
	screenshot(t, page, "console-thousand.png")

	// The selected TrainJob, filtered out of the list, is still followed: its deletion shows.
	require.NoError(t, k8sClient.Delete(context.Background(), &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tj-0250"}}))
	poll(t, page, "the deletion shows", `document.getElementById('d-state').textContent === 'Deleted'`)
	within(t, page, "a filter that keeps none", chromedp.SendKeys(chromedp.ID("filter"), "x"))
	poll(t, page, "the page says none matches", `!document.getElementById('empty').hidden && document.getElementById('empty').textContent === 'No TrainJob matches the filter.'`)
}
