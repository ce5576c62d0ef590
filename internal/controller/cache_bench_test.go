package controller

import (
	"runtime"
	"testing"

	toolscache "k8s.io/client-go/tools/cache"
)

// BenchmarkCachedObjects measures what the cache holds per TrainJob: 10,000 TrainJobs, their
// JobSets and PodGroups decoded as a watch decodes what the API server sends (testdata: a torch
// TrainJob just after its JobSet was made and that JobSet, as a real API server wrote them; a
// coscheduling PodGroup as the operator and the scheduler write it) and passed through the
// cache's transforms, then kept. B/object is the heap they hold, collected before and after.
func BenchmarkCachedObjects(b *testing.B) {
	for _, tc := range []struct {
		name, file string
		transform  toolscache.TransformFunc
	}{
		{"TrainJob", "testdata/cached-trainjob.json", keepTrainJob},
		{"JobSet", "testdata/cached-jobset.json", keepJobSetSummary},
		{"PodGroup", "testdata/cached-podgroup.json", keepPodGroupSummary},
	} {
		b.Run(tc.name, func(b *testing.B) {
			decode := testdataObjects(b, tc.file)
			const n = 10000
			kept := make([]any, n)
			for b.Loop() {
				clear(kept)
				before := liveHeap()
				for i := range kept {
					var err error
					if kept[i], err = tc.transform(decode()); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(liveHeap()-before)/n, "B/object")
			}
			runtime.KeepAlive(kept)
		})
	}
}

func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
