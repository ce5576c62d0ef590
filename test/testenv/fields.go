package testenv

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	jobsetv1alpha2 "sigs.k8s.io/jobset/api/jobset/v1alpha2"
	schedulerpluginsv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	trainer "github.com/trainjob/operator/api/v1alpha1"
)

// operatorManager tells whether a field manager is one of the operator's.
func operatorManager(name string) bool { return strings.HasPrefix(name, "trainer.kubeflow.org/") }

// FieldOverlaps lists the fields of the objects the operator writes (TrainJobs, JobSets,
// PodGroups, its Secrets and ConfigMaps) that two field managers own together, one of them the
// operator's: two writers of one field, which would undo each other's writes.
func FieldOverlaps(ctx context.Context, c client.Client) ([]string, error) {
	ours := client.HasLabels{trainer.TrainJobNameLabel}
	lists := []struct {
		list client.ObjectList
		opts []client.ListOption
	}{
		{list: &trainer.TrainJobList{}},
		{list: &jobsetv1alpha2.JobSetList{}},
		{list: &schedulerpluginsv1alpha1.PodGroupList{}, opts: []client.ListOption{ours}},
		{list: &corev1.SecretList{}, opts: []client.ListOption{ours}},
		{list: &corev1.ConfigMapList{}, opts: []client.ListOption{ours}},
	}
	var overlaps []string
	objects := 0
	for _, l := range lists {
		if err := c.List(ctx, l.list, l.opts...); err != nil {
			return nil, err
		}
		items, err := metaOf(l.list)
		if err != nil {
			return nil, err
		}
		for _, obj := range items {
			objects++
			found, err := overlapsOf(obj)
			if err != nil {
				return nil, fmt.Errorf("%T %s/%s: %w", l.list, obj.GetNamespace(), obj.GetName(), err)
			}
			overlaps = append(overlaps, found...)
		}
	}
	if objects == 0 {
		return nil, fmt.Errorf("no objects to check")
	}
	sort.Strings(overlaps)
	return overlaps, nil
}

// overlapsOf lists the fields of obj that two managers own, one of them the operator's.
func overlapsOf(obj metav1.Object) ([]string, error) {
	owned := map[string]*fieldpath.Set{}
	for _, entry := range obj.GetManagedFields() {
		if entry.FieldsV1 == nil {
			continue
		}
		set := &fieldpath.Set{}
		if err := set.FromJSON(bytes.NewReader(entry.FieldsV1.Raw)); err != nil {
			return nil, err
		}
		if prev, ok := owned[entry.Manager]; ok {
			set = set.Union(prev)
		}
		owned[entry.Manager] = set
	}
	managers := make([]string, 0, len(owned))
	for m := range owned {
		managers = append(managers, m)
	}
	sort.Strings(managers)
	var overlaps []string
	for i, a := range managers {
		for _, b := range managers[i+1:] {
			if !operatorManager(a) && !operatorManager(b) {
				continue
			}
			if both := owned[a].Intersection(owned[b]).Leaves(); !both.Empty() {
				overlaps = append(overlaps, fmt.Sprintf("%s/%s: %s and %s both own %s", obj.GetNamespace(), obj.GetName(), a, b, both))
			}
		}
	}
	return overlaps, nil
}

// metaOf returns the items of a list.
func metaOf(list client.ObjectList) ([]metav1.Object, error) {
	objs, err := apimeta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	items := make([]metav1.Object, 0, len(objs))
	for _, o := range objs {
		m, err := apimeta.Accessor(o)
		if err != nil {
			return nil, err
		}
		items = append(items, m)
	}
	return items, nil
}
