package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	"github.com/trainjob/operator/internal/gang"
)

var now = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

func condition(typ string, status metav1.ConditionStatus, reason, message string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: message}
}

func pod(name, job string, mutate func(*corev1.Pod)) corev1.Pod {
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: "uid-" + "name", CreationTimestamp: metav1.NewTime(now.Add(-time.Minute)),
			Labels: map[string]string{jobsetv1alpha2.ReplicatedJobNameKey: job, jobsetv1alpha2.JobIndexKey: "0"}},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "node"}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	if mutate != nil {
		mutate(&p)
	}
	return p
}

func scheduled(p *corev1.Pod) { p.Spec.NodeName = "node-a" }

func unschedulable(message string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: message}}
	}
}

func failedWith(code int32, message string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		scheduled(p)
		p.Status.Phase = corev1.PodFailed
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "node", State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: "Error", Message: message, FinishedAt: metav1.NewTime(now)}}}}
	}
}

func waiting(reason, message string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		scheduled(p)
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "node", State: corev1.ContainerState{
			Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}}}
	}
}

func workload(conditions ...map[string]any) *unstructured.Unstructured {
	list := make([]any, len(conditions))
	for i, c := range conditions {
		list[i] = c
	}
	wl := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"conditions": list}}}
	wl.SetName("trainjob-x-12345")
	return wl
}

// trainerJobSet is a JobSet whose trainer job has nodes pods.
func trainerJobSet(nodes int32) *jobsetv1alpha2.JobSet {
	js := &jobsetv1alpha2.JobSet{Spec: jobsetv1alpha2.JobSetSpec{ReplicatedJobs: []jobsetv1alpha2.ReplicatedJob{{Name: "node", Replicas: 1}}}}
	js.Spec.ReplicatedJobs[0].Template.Labels = map[string]string{trainer.AncestorStepLabel: trainer.AncestorTrainer}
	js.Spec.ReplicatedJobs[0].Template.Spec.Completions = ptr.To(nodes)
	return js
}

// withInitializer adds a dataset initializer to the JobSet.
func withInitializer(js *jobsetv1alpha2.JobSet) *jobsetv1alpha2.JobSet {
	init := jobsetv1alpha2.ReplicatedJob{Name: "dataset-initializer", Replicas: 1}
	init.Template.Labels = map[string]string{trainer.AncestorStepLabel: trainer.AncestorDatasetInitializer}
	js.Spec.ReplicatedJobs = append([]jobsetv1alpha2.ReplicatedJob{init}, js.Spec.ReplicatedJobs...)
	return js
}

func TestDiagnose(t *testing.T) {
	created := func(tj *trainer.TrainJob) { tj.Status.State = trainer.TrainJobCreated }
	for name, c := range map[string]struct {
		tj       func(*trainer.TrainJob)
		tree     tree
		want     string
		contains []string
	}{
		"a complete TrainJob has nothing to explain": {
			tj: func(tj *trainer.TrainJob) {
				tj.Status.Conditions = []metav1.Condition{condition(trainer.TrainJobComplete, metav1.ConditionTrue, "AllJobsCompleted", "")}
			},
		},
		"a running TrainJob has nothing to explain, though a pod failed before": {
			tj:   func(tj *trainer.TrainJob) { tj.Status.State = trainer.TrainJobRunning },
			tree: tree{pods: []corev1.Pod{pod("x-node-0-0", "node", failedWith(1, ""))}},
		},
		"a failed TrainJob: its recorded failure, with the log's end read when the kubelet kept none": {
			tj: func(tj *trainer.TrainJob) {
				tj.Status.Conditions = []metav1.Condition{condition(trainer.TrainJobFailed, metav1.ConditionTrue, "FailedJobs", "")}
				tj.Status.Failure = &trainer.PodFailure{Pod: "x-node-0-1", ReplicatedJob: "node", Rank: ptr.To[int32](1), Container: "node", ExitCode: ptr.To[int32](3), Reason: "Error"}
			},
			tree:     tree{logTails: map[string]string{"x-node-0-1": "Traceback\nValueError: bad shape"}},
			want:     CausePodFailed,
			contains: []string{"pod x-node-0-1 (replicated job node, rank 1, attempt 0), container node: Error, exit code 3", "ValueError: bad shape"},
		},
		"a failed initializer": {
			tj: func(tj *trainer.TrainJob) {
				tj.Status.Conditions = []metav1.Condition{condition(trainer.TrainJobFailed, metav1.ConditionTrue, "FailedJobs", "")}
				tj.Status.Failure = &trainer.PodFailure{Pod: "x-dataset-initializer-0-0", ReplicatedJob: "dataset-initializer", ExitCode: ptr.To[int32](1), Reason: "Error", Message: "403 Forbidden"}
			},
			want:     CauseInitializerFailed,
			contains: []string{"x-dataset-initializer-0-0", "403 Forbidden"},
		},
		"a deadline": {
			tj: func(tj *trainer.TrainJob) {
				tj.Status.Conditions = []metav1.Condition{condition(trainer.TrainJobFailed, metav1.ConditionTrue, "DeadlineExceeded", "ran past 60s")}
			},
			want:     CauseFailed,
			contains: []string{"DeadlineExceeded: ran past 60s"},
		},
		"a stall": {
			tj: func(tj *trainer.TrainJob) {
				tj.Status.State = trainer.TrainJobRunning
				tj.Status.Conditions = []metav1.Condition{condition(trainer.TrainJobStalled, metav1.ConditionTrue, "ProgressDeadlineExceeded", "no progress for 10m")}
			},
			want: CauseStalled, contains: []string{"no progress for 10m"},
		},
		"Kueue has no quota: its words": {
			tj: func(tj *trainer.TrainJob) {
				tj.Labels = map[string]string{trainer.KueueQueueLabel: "team"}
				tj.Spec.Suspend = ptr.To(true)
			},
			tree: tree{workload: workload(map[string]any{"type": "QuotaReserved", "status": "False", "reason": "Pending",
				"message": "couldn't assign flavors to pod set node: insufficient unused quota for cpu in flavor default, 3 more needed"})},
			want:     CauseQueued,
			contains: []string{`Workload trainjob-x-12345 (queue "team"), Pending: couldn't assign flavors`, "3 more needed"},
		},
		"Kueue evicted it": {
			tj: func(tj *trainer.TrainJob) { tj.Labels = map[string]string{trainer.KueueQueueLabel: "team"} },
			tree: tree{workload: workload(
				map[string]any{"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "no quota"},
				map[string]any{"type": "Evicted", "status": "True", "reason": "Preempted", "message": "Preempted to accommodate a higher priority Workload"})},
			want:     CauseQueued,
			contains: []string{"Preempted: Preempted to accommodate"},
		},
		"Kueue has made no Workload": {
			tj: func(tj *trainer.TrainJob) {
				tj.Labels = map[string]string{trainer.KueueQueueLabel: "team"}
				tj.Spec.Suspend = ptr.To(true)
			},
			want: CauseQueued, contains: []string{"no Workload for it yet"},
		},
		"an admitted TrainJob whose pods start is not queued": {
			tj: func(tj *trainer.TrainJob) {
				created(tj)
				tj.Labels = map[string]string{trainer.KueueQueueLabel: "team"}
			},
			tree: tree{jobSet: &jobsetv1alpha2.JobSet{}, workload: workload(map[string]any{"type": "Admitted", "status": "True"})},
			want: CauseStarting,
		},
		"suspended by its user": {
			tj:   func(tj *trainer.TrainJob) { tj.Spec.Suspend = ptr.To(true) },
			want: CauseSuspended, contains: []string{"kubectl trainjob resume x"},
		},
		"its JobSet cannot be made": {
			tj: func(tj *trainer.TrainJob) {
				tj.Status.Conditions = []metav1.Condition{condition(trainer.TrainJobCreated, metav1.ConditionFalse, "ObjectNotOwned", `JobSet "x" is someone else's`)}
			},
			want: CauseNotCreated, contains: []string{"ObjectNotOwned: JobSet"},
		},
		"a quota that refuses a pod, before the gang that waits for it": {
			tj: created,
			tree: tree{
				jobSet: trainerJobSet(2),
				gang:   &gangInfo{State: gang.State{Scheduler: "coscheduling", Phase: "Pending", MinMember: 2}, name: "x"},
				pods:   []corev1.Pod{pod("x-node-0-0", "node", nil)},
				events: []corev1.Event{
					{Type: corev1.EventTypeWarning, Reason: "FailedCreate", InvolvedObject: corev1.ObjectReference{Kind: "Job", Name: "x-node-0"},
						Message: `Error creating: pods "x-node-0-1-abcde" is forbidden: exceeded quota: pods, requested: pods=1, used: pods=1, limited: pods=1`},
				},
			},
			want:     CausePodsNotCreated,
			contains: []string{"Job x-node-0 cannot make its children: Error creating", "exceeded quota"},
		},
		"a quota that refuses a rank, though an initializer's pod ran": {
			tj: created,
			tree: tree{
				jobSet:       withInitializer(trainerJobSet(2)),
				initializers: map[string]bool{"dataset-initializer": true},
				pods: []corev1.Pod{
					pod("x-dataset-initializer-0-0", "dataset-initializer", func(p *corev1.Pod) { scheduled(p); p.Status.Phase = corev1.PodSucceeded }),
					pod("x-node-0-0", "node", scheduled),
				},
				events: []corev1.Event{{Type: corev1.EventTypeWarning, Reason: "FailedCreate", InvolvedObject: corev1.ObjectReference{Kind: "Job", Name: "x-node-0"},
					Message: "exceeded quota: pods"}},
			},
			want: CausePodsNotCreated, contains: []string{"exceeded quota"},
		},
		"an old refusal is no cause once every pod is there": {
			tj: created,
			tree: tree{
				jobSet: trainerJobSet(1),
				pods:   []corev1.Pod{pod("x-node-0-0", "node", scheduled)},
				events: []corev1.Event{{Type: corev1.EventTypeWarning, Reason: "FailedCreate", Message: "exceeded quota"}},
			},
			want: CauseStarting,
		},
		"a gang that waits, with the scheduler's words": {
			tj: created,
			tree: tree{
				gang: &gangInfo{State: gang.State{Scheduler: "coscheduling", Phase: "Pending", MinMember: 2, Timeout: time.Minute}, name: "x", created: now.Add(-2 * time.Minute)},
				pods: []corev1.Pod{pod("x-node-0-0", "node", unschedulable("0/4 nodes are available: 4 Insufficient cpu.")), pod("x-node-0-1", "node", nil)},
			},
			want:     CauseGangWait,
			contains: []string{"coscheduling PodGroup x is Pending: 0 of 2 pods scheduled, for 2m (its schedule timeout is 60s); the scheduler on pod x-node-0-0: 0/4 nodes are available"},
		},
		"a gang whose PodGroup says Running while none of its pods has a node": {
			tj: created,
			tree: tree{
				gang: &gangInfo{State: gang.State{Scheduler: "coscheduling", Phase: "Running", Running: true, MinMember: 2}, name: "x"},
				pods: []corev1.Pod{pod("x-node-0-0", "node", unschedulable("0/4 nodes are available")), pod("x-node-0-1", "node", nil)},
			},
			want: CauseGangWait, contains: []string{"PodGroup x is Running: 0 of 2 pods scheduled"},
		},
		"a gang that runs is no cause": {
			tj: created,
			tree: tree{
				jobSet: &jobsetv1alpha2.JobSet{},
				gang:   &gangInfo{State: gang.State{Scheduler: "coscheduling", Phase: "Running", Running: true, MinMember: 1}},
				pods:   []corev1.Pod{pod("x-node-0-0", "node", scheduled)},
			},
			want: CauseStarting,
		},
		"a pod no node has room for": {
			tj:       created,
			tree:     tree{pods: []corev1.Pod{pod("x-node-0-0", "node", scheduled), pod("x-node-0-1", "node", unschedulable("0/4 nodes are available: 4 Insufficient nvidia.com/gpu."))}},
			want:     CauseUnschedulable,
			contains: []string{"pod x-node-0-1 cannot be scheduled: 0/4 nodes are available: 4 Insufficient nvidia.com/gpu."},
		},
		"a pod whose scheduler is not there": {
			tj: created,
			tree: tree{pods: []corev1.Pod{pod("x-node-0-0", "node", func(p *corev1.Pod) {
				p.Spec.SchedulerName = "kai-scheduler"
			})}},
			want:     CauseUnschedulable,
			contains: []string{`waits for scheduler "kai-scheduler", which has not looked at it in 60s`},
		},
		"an image that cannot be pulled, before a failed pod": {
			tj: created,
			tree: tree{pods: []corev1.Pod{
				pod("x-node-0-0", "node", failedWith(1, "")),
				pod("x-node-0-1", "node", waiting("ImagePullBackOff", `Back-off pulling image "pytorch/pytorch:typo"`)),
			}},
			want:     CauseImagePull,
			contains: []string{"x-node-0-1", "ImagePullBackOff", "pytorch/pytorch:typo"},
		},
		"an initializer that failed, and is retried": {
			tj: created,
			tree: tree{
				initializers: map[string]bool{"model-initializer": true},
				pods:         []corev1.Pod{pod("x-model-initializer-0-0", "model-initializer", failedWith(2, "no such model"))},
			},
			want:     CauseInitializerFailed,
			contains: []string{"x-model-initializer-0-0", "exit code 2", "no such model"},
		},
		"a failed pod a restart replaces: the first of its attempt": {
			tj: created,
			tree: tree{pods: []corev1.Pod{
				pod("x-node-0-0", "node", failedWith(137, "Killed")),
				pod("x-node-0-1", "node", failedWith(1, "")),
			}},
			want:     CausePodFailed,
			contains: []string{"exit code 137", "(1 more pods of that attempt failed with it)"},
		},
		"no JobSet yet": {
			tj:   func(tj *trainer.TrainJob) {},
			want: CauseNotCreated, contains: []string{"has not made its JobSet yet"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			tj := &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "ns"}}
			c.tj(tj)
			tr := c.tree
			tr.tj = tj
			got := diagnose(&tr, now)
			if c.want == "" {
				assert.Nil(t, got)
				return
			}
			if assert.NotNil(t, got) {
				assert.Equal(t, c.want, got.Reason, got.Message)
				for _, s := range c.contains {
					assert.Contains(t, got.Message, s)
				}
			}
		})
	}
}

func TestProgressLine(t *testing.T) {
	tj := &trainer.TrainJob{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Status: trainer.TrainJobStatus{State: trainer.TrainJobRunning}}
	assert.Equal(t, "no progress reported yet (Running)", progressLine(tj, now))

	tj.Status.TrainerStatus = &trainer.TrainerStatus{ProgressPercentage: ptr.To[int32](40), EstimatedRemainingSeconds: ptr.To[int32](300),
		Metrics: []trainer.Metric{{Name: "loss", Value: "0.25"}, {Name: "accuracy", Value: "0.91"}}, LastUpdatedTime: metav1.NewTime(now.Add(-time.Minute))}
	assert.Equal(t, "["+strings.Repeat("█", 12)+strings.Repeat("░", 18)+"]   40%  ETA 4m  loss=0.25  accuracy=0.91 (Running, reported 60s ago)",
		progressLine(tj, now), "the ETA counts down from the report")
	assert.Equal(t, "40%", progressText(tj))
	assert.Equal(t, "0s", etaText(tj, now.Add(time.Hour)), "an ETA long past is now, not negative")

	tj.Status.Conditions = []metav1.Condition{condition(trainer.TrainJobComplete, metav1.ConditionTrue, "", "")}
	assert.Empty(t, etaText(tj, now), "a finished TrainJob has no ETA")
	assert.Equal(t, "["+strings.Repeat("░", 30)+"]", bar(-5))
	assert.Equal(t, "["+strings.Repeat("█", 30)+"]", bar(250))
}

func TestRerunOf(t *testing.T) {
	old := &trainer.TrainJob{
		ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "ns", UID: "u", ResourceVersion: "7",
			Labels: map[string]string{trainer.KueueQueueLabel: "team", "project": "p", "kueue.x-k8s.io/priority-class": "high",
				"kueue.x-k8s.io/prebuilt-workload-name": "old-wl", "kueue.x-k8s.io/multikueue-origin": "manager"},
			Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}", "note": "n", "kueue.x-k8s.io/something": "x"}},
		Spec: trainer.TrainJobSpec{
			RuntimeRef: trainer.RuntimeRef{Name: "torch"},
			Suspend:    ptr.To(true),
			Trainer:    &trainer.Trainer{NumNodes: ptr.To[int32](4)},
			RuntimePatches: []trainer.RuntimePatch{
				{Manager: "kueue.x-k8s.io/manager"},
				{Manager: "platform.example.com/gpus"},
			},
		},
		Status: trainer.TrainJobStatus{State: trainer.TrainJobComplete},
	}
	got := rerunOf(old)
	assert.Equal(t, metav1.ObjectMeta{Namespace: "ns",
		Labels:      map[string]string{trainer.KueueQueueLabel: "team", "project": "p", "kueue.x-k8s.io/priority-class": "high"},
		Annotations: map[string]string{"note": "n", RerunOfAnnotation: "x"}}, got.ObjectMeta, "what Kueue wrote is Kueue's to write again")
	assert.Equal(t, trainer.TrainJobSpec{
		RuntimeRef:     trainer.RuntimeRef{Name: "torch"},
		Trainer:        &trainer.Trainer{NumNodes: ptr.To[int32](4)},
		RuntimePatches: []trainer.RuntimePatch{{Manager: "platform.example.com/gpus"}},
	}, got.Spec, "Kueue's patches and the suspension are not the author's")
	assert.Empty(t, got.Status)
	assert.Len(t, old.Spec.RuntimePatches, 2, "the finished TrainJob was changed")
	assert.Equal(t, "x", rerunSuffix.ReplaceAllString("x-rerun-12", ""))
}

func TestPodsByRank(t *testing.T) {
	js := &jobsetv1alpha2.JobSet{Spec: jobsetv1alpha2.JobSetSpec{ReplicatedJobs: []jobsetv1alpha2.ReplicatedJob{
		{Name: "launcher", Replicas: 1},
		{Name: "node", Replicas: 2},
	}}}
	js.Spec.ReplicatedJobs[1].Template.Labels = map[string]string{trainer.AncestorStepLabel: trainer.AncestorTrainer}
	js.Spec.ReplicatedJobs[1].Template.Spec.Completions = ptr.To[int32](2)
	at := func(name, jobIndex, index, attempt string, age time.Duration) corev1.Pod {
		p := pod(name, "node", nil)
		p.Labels[jobsetv1alpha2.JobIndexKey] = jobIndex
		p.Labels["jobset.sigs.k8s.io/restart-attempt"] = attempt
		p.Annotations = map[string]string{"batch.kubernetes.io/job-completion-index": index}
		p.CreationTimestamp = metav1.NewTime(now.Add(-age))
		return p
	}
	pods := []corev1.Pod{
		at("a", "0", "0", "0", time.Hour),
		at("b", "0", "0", "1", time.Minute), // the restart's
		at("c", "0", "1", "1", time.Minute),
		at("d", "1", "0", "1", 2*time.Minute),
		at("e", "1", "0", "1", time.Minute), // the Job's retry
		pod("launcher", "launcher", nil),
	}
	got := map[int]string{}
	for rank, p := range podsByRank(js, pods, trainer.AncestorTrainer) {
		got[rank] = p.Name
	}
	assert.Equal(t, map[int]string{0: "b", 1: "c", 2: "e"}, got)
	assert.Empty(t, podsByRank(js, pods, trainer.AncestorDatasetInitializer))
}

func TestPrintable(t *testing.T) {
	assert.Equal(t, "plain text\n\tand a tab, ünïcödé", printable("plain text\n\tand a tab, ünïcödé"))
	assert.Equal(t, `title \x1b]0;PWNED\x07 \x1b[2J\x0d \u009b31m`, printable("title \x1b]0;PWNED\x07 \x1b[2J\r \u009b31m"),
		"what the cluster says never drives the terminal")
}

func TestCopyLines(t *testing.T) {
	long := strings.Repeat("█", maxLogLine) // 3 bytes a character: a line of 3 pieces
	in := "epoch 1 starts\n" + long + "\nepoch 1 done\nno newline at the end"
	var raw strings.Builder
	require.NoError(t, copyLines(&raw, strings.NewReader(in), "", false))
	assert.Equal(t, in, raw.String(), "without a prefix the log is copied as it is")

	var w recordingWriter
	require.NoError(t, copyLines(&w, strings.NewReader(in), "[rank 1] ", false))
	require.Len(t, w.writes, 6, "a line a write; a line longer than maxLogLine in pieces")
	assert.Equal(t, "[rank 1] epoch 1 starts\n", w.writes[0])
	assert.Equal(t, "[rank 1] epoch 1 done\n", w.writes[4])
	assert.Equal(t, "[rank 1] no newline at the end\n", w.writes[5])
	got := ""
	for _, piece := range w.writes[1:4] {
		assert.True(t, strings.HasPrefix(piece, "[rank 1] "))
		got += strings.TrimSuffix(strings.TrimPrefix(piece, "[rank 1] "), "\n")
	}
	assert.Equal(t, long, got, "nothing of a long line is lost")

	w = recordingWriter{}
	require.NoError(t, copyLines(&w, strings.NewReader("a\nb"), "", true))
	assert.Equal(t, []string{"a\n", "b\n"}, w.writes, "the console gets whole lines")
}

type recordingWriter struct{ writes []string }

func (w *recordingWriter) Write(p []byte) (int, error) {
	w.writes = append(w.writes, string(p))
	return len(p), nil
}
