package v1alpha1

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// upstreamReleases are the releases of upstream Kubeflow Trainer whose CRDs testdata/upstream
// holds (make upstream-crds writes them): the API accepts what each accepts.
var upstreamReleases = []string{"v2.2.0", "v2.3.0"}

var update = flag.Bool("update", false, "write testdata/upstream's list of differences from the schemas as they are")

// upstreamSchemaSection is the part of docs/api.md that explains, field by field, each difference
// between upstream's schema and ours.
const upstreamSchemaSection = "### Where upstream's schema and this one differ"

// Every difference between upstream Kubeflow Trainer's CRDs and ours is a value one of them
// accepts and the other refuses, or a field only one of them has: docs/api.md must say, for each,
// what this operator does with it and why. The schemas are compared constraint by constraint
// (type, bounds, patterns, enums, required fields, CEL rules, list and map types, defaults), the
// runtimes' two kinds together (their schemas are the same). The status is this operator's to
// write, and is left out.
func TestEveryDifferenceFromUpstreamsSchemaIsExplained(t *testing.T) {
	// Each release's differences, by path; the fields only ours has, of any release.
	differ, onlyOurs := map[string]map[string][]string{}, map[string]bool{}
	for _, release := range upstreamReleases {
		differ[release] = upstreamDifferences(t, release, onlyOurs)
		require.NotEmpty(t, differ[release], "no difference from %s found at all: the comparison compares nothing", release)

		// Each difference as it is, so that a change within a field already explained (a bound
		// moved) fails too, and its row is read again.
		var listed strings.Builder
		for _, path := range slices.Sorted(maps.Keys(differ[release])) {
			fmt.Fprintf(&listed, "%s\n", path)
			for _, what := range differ[release][path] {
				fmt.Fprintf(&listed, "\t%s\n", what)
			}
		}
		golden := filepath.Join("testdata", "upstream", release+"-differences.txt")
		if *update {
			require.NoError(t, os.WriteFile(golden, []byte(listed.String()), 0o644))
		}
		want, err := os.ReadFile(golden)
		require.NoError(t, err)
		assert.Equal(t, string(want), listed.String(),
			"the schemas differ otherwise than %s says: check each changed field's row in docs/api.md, then write the file again (go test ./api/v1alpha1 -run %s -update)",
			golden, t.Name())
	}

	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "api.md"))
	require.NoError(t, err)
	explained := explainedFields(t, string(doc))
	for _, release := range upstreamReleases {
		for _, path := range slices.Sorted(maps.Keys(differ[release])) {
			assert.True(t, explained[path], "docs/api.md's %q does not explain `%s`, whose schema differs from upstream %s's: %s",
				upstreamSchemaSection, path, release, strings.Join(differ[release][path], "; "))
		}
	}
	for _, path := range slices.Sorted(maps.Keys(explained)) {
		assert.True(t, slices.ContainsFunc(upstreamReleases, func(release string) bool { return differ[release][path] != nil }),
			"docs/api.md's %q explains `%s`, whose schema is now that of upstream %v: take its row out",
			upstreamSchemaSection, path, upstreamReleases)
	}
	// A field upstream lacks is not a value it accepts, but its users should still learn of it.
	compatibility := string(doc)[strings.Index(string(doc), "## Compatibility with upstream"):]
	for _, path := range slices.Sorted(maps.Keys(onlyOurs)) {
		// The field with its parent (`torch.elasticPolicy`, `trainer.elasticPolicy`), or alone for
		// a field of spec (`runPolicy`), in a code span.
		parts := strings.Split(path[strings.Index(path, " ")+1:], ".")
		span := "`(?:[^`]*[^.\\w`])?(?:spec\\.)?" + regexp.QuoteMeta(parts[len(parts)-1]) + "\\b[^`]*`"
		if parent := parts[len(parts)-2]; parent != "spec" {
			span = "`[^`]*" + regexp.QuoteMeta(strings.TrimSuffix(parent, "[]")) + "(?:\\[\\])?\\." + regexp.QuoteMeta(parts[len(parts)-1]) + "\\b[^`]*`"
		}
		assert.Regexp(t, span, compatibility,
			"docs/api.md's compatibility section does not name `%s`, which upstream %v lacks", path, upstreamReleases)
	}
}

// upstreamDifferences compares upstream release's CRDs with ours: how they differ, by kind (as
// docs/api.md names them) and path, and into onlyOurs the fields only ours has.
func upstreamDifferences(t *testing.T, release string, onlyOurs map[string]bool) map[string][]string {
	t.Helper()
	kinds := map[string][]string{ // as docs/api.md names them: their CRDs
		"TrainJob": {"trainer.kubeflow.org_trainjobs.yaml"},
		"runtime":  {"trainer.kubeflow.org_trainingruntimes.yaml", "trainer.kubeflow.org_clustertrainingruntimes.yaml"},
	}
	differ := map[string][]string{}
	for _, kind := range slices.Sorted(maps.Keys(kinds)) {
		var first map[string][]string
		for _, file := range kinds[kind] {
			upstream := openAPISchema(t, filepath.Join("testdata", "upstream", release, file))
			ours := openAPISchema(t, filepath.Join("..", "..", "config", "crd", "bases", file))
			d := schemaDiff{differ: map[string][]string{}, onlyOurs: map[string]bool{}}
			d.compare("spec", upstream.Properties["spec"], ours.Properties["spec"])
			if !slices.Equal(upstream.Required, ours.Required) {
				d.differ["spec"] = append(d.differ["spec"], fmt.Sprintf("required at the top: %v upstream, %v here", upstream.Required, ours.Required))
			}
			if first == nil {
				first = d.differ
			} else {
				assert.Equal(t, first, d.differ, "the runtimes' kinds differ from upstream %s's differently: %s", release, file)
			}
			for path, what := range d.differ {
				differ[kind+" "+path] = what
			}
			for path := range d.onlyOurs {
				onlyOurs[kind+" "+path] = true
			}
		}
	}
	return differ
}

// openAPISchema reads the openAPIV3Schema of a CRD's one version.
func openAPISchema(t *testing.T, path string) *apiextensionsv1.JSONSchemaProps {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var crd apiextensionsv1.CustomResourceDefinition
	require.NoError(t, yaml.UnmarshalStrict(data, &crd), path)
	require.Len(t, crd.Spec.Versions, 1, path)
	return crd.Spec.Versions[0].Schema.OpenAPIV3Schema
}

// schemaDiff collects, by field path (a list's items as [], a map's values as [key]), how the
// schemas differ there, and the fields only ours has.
type schemaDiff struct {
	differ   map[string][]string
	onlyOurs map[string]bool
}

func (d schemaDiff) compare(path string, upstream, ours apiextensionsv1.JSONSchemaProps) {
	note := func(format string, args ...any) {
		d.differ[path] = append(d.differ[path], fmt.Sprintf(format, args...))
	}
	same := func(what string, u, o any) {
		if fmt.Sprint(u) != fmt.Sprint(o) {
			note("%s: %v upstream, %v here", what, u, o)
		}
	}
	same("type", upstream.Type, ours.Type)
	same("format", upstream.Format, ours.Format)
	same("int-or-string", upstream.XIntOrString, ours.XIntOrString)
	same("nullable", upstream.Nullable, ours.Nullable)
	same("maxLength", bound(upstream.MaxLength), bound(ours.MaxLength))
	same("minLength", bound(upstream.MinLength), bound(ours.MinLength))
	same("maxItems", bound(upstream.MaxItems), bound(ours.MaxItems))
	same("minItems", bound(upstream.MinItems), bound(ours.MinItems))
	same("maxProperties", bound(upstream.MaxProperties), bound(ours.MaxProperties))
	same("minProperties", bound(upstream.MinProperties), bound(ours.MinProperties))
	same("maximum", bound(upstream.Maximum), bound(ours.Maximum))
	same("minimum", bound(upstream.Minimum), bound(ours.Minimum))
	same("exclusive bounds", []bool{upstream.ExclusiveMinimum, upstream.ExclusiveMaximum}, []bool{ours.ExclusiveMinimum, ours.ExclusiveMaximum})
	same("pattern", upstream.Pattern, ours.Pattern)
	same("enum", raw(upstream.Enum...), raw(ours.Enum...))
	same("default", raw(ptr.Deref(upstream.Default, apiextensionsv1.JSON{})), raw(ptr.Deref(ours.Default, apiextensionsv1.JSON{})))
	same("required", upstream.Required, ours.Required)
	same("rules", rules(upstream.XValidations), rules(ours.XValidations))
	same("preserves unknown fields", ptr.Deref(upstream.XPreserveUnknownFields, false), ptr.Deref(ours.XPreserveUnknownFields, false))
	same("embedded resource", upstream.XEmbeddedResource, ours.XEmbeddedResource)
	same("list type", ptr.Deref(upstream.XListType, ""), ptr.Deref(ours.XListType, ""))
	same("list map keys", upstream.XListMapKeys, ours.XListMapKeys)
	same("map type", ptr.Deref(upstream.XMapType, ""), ptr.Deref(ours.XMapType, ""))
	same("allOf, anyOf, oneOf, not", []int{len(upstream.AllOf), len(upstream.AnyOf), len(upstream.OneOf)}, []int{len(ours.AllOf), len(ours.AnyOf), len(ours.OneOf)})
	same("not", upstream.Not != nil, ours.Not != nil)

	for _, name := range slices.Sorted(maps.Keys(upstream.Properties)) {
		if o, ok := ours.Properties[name]; ok {
			d.compare(path+"."+name, upstream.Properties[name], o)
		} else {
			d.differ[path+"."+name] = append(d.differ[path+"."+name], "a field upstream has and this schema does not")
		}
	}
	for name := range ours.Properties {
		if _, ok := upstream.Properties[name]; !ok {
			d.onlyOurs[path+"."+name] = true
		}
	}
	if upstream.Items != nil || ours.Items != nil {
		u, o := items(upstream.Items), items(ours.Items)
		if u == nil || o == nil {
			note("items: %v upstream, %v here", u != nil, o != nil)
		} else {
			d.compare(path+"[]", *u, *o)
		}
	}
	if upstream.AdditionalProperties != nil || ours.AdditionalProperties != nil {
		u, o := values(upstream.AdditionalProperties), values(ours.AdditionalProperties)
		if u == nil || o == nil {
			note("map values: %v upstream, %v here", u != nil, o != nil)
		} else {
			d.compare(path+"[key]", *u, *o)
		}
	}
}

func bound[T int64 | float64](v *T) string {
	if v == nil {
		return "none"
	}
	return fmt.Sprint(*v)
}

func raw(values ...apiextensionsv1.JSON) []string {
	var out []string
	for _, v := range values {
		if len(v.Raw) > 0 {
			out = append(out, string(v.Raw))
		}
	}
	return out
}

func rules(rs apiextensionsv1.ValidationRules) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Rule)
	}
	return out
}

func items(i *apiextensionsv1.JSONSchemaPropsOrArray) *apiextensionsv1.JSONSchemaProps {
	if i == nil {
		return nil
	}
	return i.Schema
}

func values(v *apiextensionsv1.JSONSchemaPropsOrBool) *apiextensionsv1.JSONSchemaProps {
	if v == nil {
		return nil
	}
	return v.Schema
}

// explainedFields reads the fields the rows of docs/api.md's section explain: the code spans of
// each row's first cell, each a kind and a path, where {a,b} stands for each of its words in turn.
func explainedFields(t *testing.T, doc string) map[string]bool {
	t.Helper()
	start := strings.Index(doc, "\n"+upstreamSchemaSection+"\n")
	require.GreaterOrEqual(t, start, 0, "docs/api.md has no section %q", upstreamSchemaSection)
	section := doc[start+len(upstreamSchemaSection)+2:]
	if end := strings.Index(section, "\n#"); end >= 0 {
		section = section[:end]
	}
	explained := map[string]bool{}
	span := regexp.MustCompile("`([^`]+)`")
	rows := 0
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		rows++
		first := strings.SplitN(line[1:], " | ", 2)[0]
		for _, m := range span.FindAllStringSubmatch(first, -1) {
			for _, path := range expand(m[1]) {
				require.Regexp(t, `^(TrainJob|runtime) spec\b`, path, "docs/api.md names a field as a kind and a path: %q", m[1])
				require.False(t, explained[path], "docs/api.md explains `%s` twice", path)
				explained[path] = true
			}
		}
	}
	require.NotZero(t, rows, "docs/api.md's %q has no rows", upstreamSchemaSection)
	return explained
}

// expand writes out each {a,b,...} of a path: a{b,c}d is abd and acd.
func expand(path string) []string {
	open := strings.Index(path, "{")
	if open < 0 {
		return []string{path}
	}
	end := open + strings.Index(path[open:], "}")
	var out []string
	for _, word := range strings.Split(path[open+1:end], ",") {
		out = append(out, expand(path[:open]+word+path[end+1:])...)
	}
	return out
}
