// Package bench measures the operator against the least the API server must do for the same
// result, in one run: `make bench`. Each measured run gets a fresh etcd and kube-apiserver, with
// the operator's and JobSet's CRDs and no webhooks (the operator's and JobSet's would cost both
// sides the same), and one of two writers:
//
//   - floor: the load generator itself writes what the operator would, per TrainJob: its create,
//     its runtime's snapshot, its children (the MPI Secret and hostfile, the gang's PodGroup),
//     its JobSet, one status write (which records the snapshot and the JobSet) and the event that
//     says the JobSet was created, with as many writers as the operator has workers. Nothing the API server does for the same result can be less.
//   - operator: the load generator only creates the TrainJobs; bin/manager, run as its own
//     program with cmd/main.go's defaults, does the rest.
//
// Both are watched the same way, so the watch's cost is the same on both sides. The figures are
// printed per run, and as operator/floor ratios at the end. Timings are never asserted: the
// benchmark measures, docs/performance.md records.
package bench

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/trainjob/operator/internal/controller"
)

var (
	count          = flag.Int("trainjobs", 3000, "TrainJobs per measured run")
	rate           = flag.Float64("rate", 0, "TrainJobs created per second, steadily; 0 creates them as fast as the clients can")
	clients        = flag.Int("clients", 16, "clients creating TrainJobs at once")
	workloadList   = flag.String("workloads", "torch,mpi,gang", "the workloads to measure, of: "+strings.Join(slices.Sorted(maps.Keys(workloads)), ","))
	managerProfile = flag.String("manager-profile", "", "write a CPU profile of the manager's first 15 seconds of each run to this path, .<workload> added")
	apiProfile     = flag.String("apiserver-profile", "", "write a CPU profile of the API server's first 15 seconds of each run to this path, .<workload>.<floor|operator> added (at size, also of the restart: .restart.<workload>)")
	managerHeap    = flag.String("manager-heap", "", "write a heap profile of the manager at the end of each run (after a GC: what it keeps) to this path, .<workload> added")
	repeat         = flag.Int("repeat", 1, "measure each workload's floor and operator this many times, in turn; the summary adds the median ratios")
	restart        = flag.Bool("restart", false, "after the operator's run, finish half the JobSets, restart the manager and count its writes")
	managerEnv     = flag.String("manager-env", "", "comma-separated NAME=value pairs added to the manager's environment, e.g. GOGC=50")
	memoryLimit    = flag.String("memory-limit", "", "at size, a container memory limit in bytes, passed as MEMORY_LIMIT (as the install passes limits.memory) to each manager started "+
		"after the population (whose manager holds every TrainJob unfinished at once, as no cluster does)")
	watchedFloor = flag.Bool("watched-floor", false, "at size (-existing), measure each pair's floor a second time while this process holds plain caches of the kinds every operator "+
		"of the workload's TrainJobs watches (TrainJobs, JobSets, a gang's PodGroups): what the floor costs with an operator's watches")
	withHistory = flag.Bool("history", false, "also measure the operator with the history (bin/history, SQLite) recording every TrainJob beside it: each pair gets a third run, "+
		"and the summary the medians of its ratios to the floor and to the operator without it")
	existing = flag.Int("existing", 0, "TrainJobs made before the measured runs, mixed as a cluster holds them (of every ten: 7 finished, 2 suspended, 1 queued in Kueue); "+
		"each workload's runs then share one API server, and the manager's restarts at that size are measured first")
)

// comparisons are the measured pairs, printed at the end.
var comparisons []comparison

type comparison struct {
	workload        string
	floor, operator *result
	// watched is the floor again with an operator's watches (-watched-floor), or nil.
	watched *result
	// history is the operator again with the history recording beside it (-history), or nil.
	history *result
}

func TestMain(m *testing.M) {
	flag.Parse()
	// The observer's watches end with their cluster; that is not worth a log.
	ctrl.SetLogger(logr.Discard())
	code := m.Run()
	printComparisons(os.Stdout, comparisons)
	printSizes(os.Stdout)
	os.Exit(code)
}

// BenchmarkOperator measures each workload with the floor's writer, then the operator's, each in
// a fresh API server, -repeat times in turn. It runs once whatever -benchtime says: a run is
// already thousands of TrainJobs.
func BenchmarkOperator(b *testing.B) {
	if _, ok := controller.SoftMemoryLimit(*memoryLimit); *memoryLimit != "" && !ok {
		b.Fatalf("-memory-limit %q: give the limit in bytes, as MEMORY_LIMIT takes it", *memoryLimit)
	}
	if *existing == 0 && (*memoryLimit != "" || *watchedFloor) {
		b.Fatal("-memory-limit and -watched-floor apply at size: give -existing")
	}
	names := strings.Split(*workloadList, ",")
	for _, name := range names {
		if _, ok := workloads[name]; !ok {
			b.Fatalf("unknown workload %q: choose among %s", name, strings.Join(slices.Sorted(maps.Keys(workloads)), ","))
		}
	}
	if *existing > 0 {
		for _, name := range names {
			b.Run(name+"@size", func(b *testing.B) { measureAtSize(b, workloads[name]) })
		}
		return
	}
	for i := range *repeat {
		for _, name := range names {
			w, c := workloads[name], comparison{workload: name}
			if *repeat > 1 {
				c.workload = fmt.Sprintf("%s#%d", name, i+1)
			}
			b.Run(c.workload+"/floor", func(b *testing.B) { c.floor = measure(b, w, floorWriter) })
			b.Run(c.workload+"/operator", func(b *testing.B) { c.operator = measure(b, w, operatorWriter) })
			if *withHistory {
				b.Run(c.workload+"/operator+history", func(b *testing.B) { c.history = measureWithHistory(b, w) })
			}
			if c.floor != nil && c.operator != nil {
				comparisons = append(comparisons, c)
			}
		}
	}
}

// printComparisons prints, per workload, the floor's figures, the operator's, and their ratio.
func printComparisons(out io.Writer, cs []comparison) {
	if len(cs) == 0 {
		return
	}
	pace := "as fast as they can"
	if *rate > 0 {
		pace = fmt.Sprintf("at %.0f/s", *rate)
	}
	fmt.Fprintf(out, "\nN = %d TrainJobs per run, %d clients creating them %s\n\n", *count, *clients, pace)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "workload\tJobSets/s floor\toperator\tratio\tp99 ms floor\toperator\tratio\trequests/TJ floor\toperator\t409/TJ\tAPI CPU ms/TJ floor\toperator\tratio\tetcd CPU ratio\tmanager CPU ms/TJ\tmanager peak RSS MiB\t")
	for _, c := range cs {
		f, o := c.floor, c.operator
		fmt.Fprintf(w, "%s\t%.0f\t%.0f\t%.2f\t%.0f\t%.0f\t%.2f\t%.2f\t%.2f\t%.3f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.0f\t\n", c.workload,
			f.throughput(), o.throughput(), o.throughput()/f.throughput(),
			ms(f.p(99)), ms(o.p(99)), ms(o.p(99))/ms(f.p(99)),
			f.perTrainJob(f.requests), o.perTrainJob(o.requests), o.perTrainJob(o.conflicts),
			f.apiCPUPerTrainJob(), o.apiCPUPerTrainJob(), o.apiCPUPerTrainJob()/f.apiCPUPerTrainJob(),
			o.etcdCPU.Seconds()/f.etcdCPU.Seconds(), ms(o.managerCPU)/float64(o.n), float64(o.managerPeakRSS)/(1<<20))
	}
	_ = w.Flush()
	printWatched(out, cs)
	if *repeat > 1 {
		printMedians(out, cs, "against the floor")
	}
	printHistory(out, cs)
	for _, c := range cs {
		fmt.Fprintf(out, "\n%s: API requests per TrainJob, by verb, resource and code\n", c.workload)
		printRequests(out, c.floor, c.operator)
		if c.operator.restartWrites != nil {
			fmt.Fprintf(out, "\n%s: writes by the restarted manager, with %d TrainJobs (half of them finished): %.0f\n",
				c.workload, *count, c.operator.restartWrites.total())
			for _, k := range c.operator.restartWrites.kinds() {
				fmt.Fprintf(out, "  %s\t%.0f\n", k, c.operator.restartWrites[k])
			}
		}
	}
}

// printWatched prints, for the pairs whose floor was measured again with an operator's watches
// (-watched-floor), that floor's figures and the operator's against them.
func printWatched(out io.Writer, cs []comparison) {
	cs = slices.DeleteFunc(slices.Clone(cs), func(c comparison) bool { return c.watched == nil })
	if len(cs) == 0 {
		return
	}
	fmt.Fprintf(out, "\nThe floor again, with an operator's watches\n\n")
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "workload\tJobSets/s watched floor\toperator\tratio\tp99 ms watched floor\trequests/TJ watched floor\tAPI CPU ms/TJ watched floor\toperator\tratio\twatched floor / floor\t")
	for _, c := range cs {
		f, o := c.watched, c.operator
		fmt.Fprintf(w, "%s\t%.0f\t%.0f\t%.2f\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t\n", c.workload,
			f.throughput(), o.throughput(), o.throughput()/f.throughput(), ms(f.p(99)), f.perTrainJob(f.requests),
			f.apiCPUPerTrainJob(), o.apiCPUPerTrainJob(), o.apiCPUPerTrainJob()/f.apiCPUPerTrainJob(),
			f.apiCPUPerTrainJob()/c.floor.apiCPUPerTrainJob())
	}
	_ = w.Flush()
}

// printHistory prints, for the pairs measured with the history too (-history), the medians of
// the ratios of the operator with the history to the floor, and to the operator without it.
func printHistory(out io.Writer, cs []comparison) {
	cs = slices.DeleteFunc(slices.Clone(cs), func(c comparison) bool { return c.history == nil })
	if len(cs) == 0 {
		return
	}
	toFloor, toOperator := slices.Clone(cs), slices.Clone(cs)
	for i, c := range cs {
		toFloor[i].operator = c.history
		toOperator[i].floor, toOperator[i].operator = c.operator, c.history
	}
	printMedians(out, toFloor, "the operator with the history, against the floor")
	printMedians(out, toOperator, "the operator with the history, against the operator without it")
}

// printRequests prints the floor's and the operator's requests per TrainJob side by side.
func printRequests(out io.Writer, floor, operator *result) {
	all := maps.Clone(floor.requests)
	maps.Copy(all, operator.requests)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "  request\tfloor\toperator\t")
	for _, k := range all.kinds() {
		f, o := floor.requests[k]/float64(floor.n), operator.requests[k]/float64(operator.n)
		if f < 0.001 && o < 0.001 {
			continue
		}
		fmt.Fprintf(w, "  %s\t%.3f\t%.3f\t\n", k, f, o)
	}
	_ = w.Flush()
}

// printMedians prints, per workload, the median of each operator/floor ratio over the repeated
// runs, and the largest manager peak RSS.
func printMedians(out io.Writer, cs []comparison, against string) {
	byWorkload := map[string][]comparison{}
	for _, c := range cs {
		name, _, _ := strings.Cut(c.workload, "#")
		byWorkload[name] = append(byWorkload[name], c)
	}
	median := func(pairs []comparison, ratio func(f, o *result) float64) float64 {
		var rs []float64
		for _, c := range pairs {
			rs = append(rs, ratio(c.floor, c.operator))
		}
		slices.Sort(rs)
		if len(rs)%2 == 1 {
			return rs[len(rs)/2]
		}
		return (rs[len(rs)/2-1] + rs[len(rs)/2]) / 2
	}
	fmt.Fprintf(out, "\nMedians over %d runs of each, %s\n\n", *repeat, against)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "workload\tJobSets/s ratio\tp99 ratio\trequests/TJ ratio\tAPI CPU ratio\tmanager peak RSS MiB (most)\t")
	for _, name := range slices.Sorted(maps.Keys(byWorkload)) {
		pairs := byWorkload[name]
		var rss uint64
		for _, c := range pairs {
			rss = max(rss, c.operator.managerPeakRSS)
		}
		fmt.Fprintf(w, "%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.0f\t\n", name,
			median(pairs, func(f, o *result) float64 { return o.throughput() / f.throughput() }),
			median(pairs, func(f, o *result) float64 { return ms(o.p(99)) / ms(f.p(99)) }),
			median(pairs, func(f, o *result) float64 { return o.perTrainJob(o.requests) / f.perTrainJob(f.requests) }),
			median(pairs, func(f, o *result) float64 { return o.apiCPUPerTrainJob() / f.apiCPUPerTrainJob() }),
			float64(rss)/(1<<20))
	}
	_ = w.Flush()
	watched := slices.DeleteFunc(slices.Clone(cs), func(c comparison) bool { return c.watched == nil })
	if len(watched) == 0 {
		return
	}
	for i := range watched {
		watched[i].floor, watched[i].watched = watched[i].watched, nil
	}
	printMedians(out, watched, "against the floor with an operator's watches")
}
