// Command monitoring-check checks the operator's alerts and dashboard before promtool runs their
// rule tests (make test-monitoring): the Grafana dashboard decodes strictly with Grafana's own
// schema (grafana-foundation-sdk) and its queries parse as PromQL; every alert has a severity, a
// summary and a description; and every metric a query or a rule reads is one docs/metrics.md
// lists, which internal/controller's TestDocumentedMetricsAreExported holds to what the manager
// registers. It writes the PrometheusRule's .spec.groups as a rule file for promtool, which does
// not read PrometheusRules.
//
// It lives in this build-only module, beside promtool, so that the operator's go.mod does not
// gain Prometheus' server and Grafana's SDK.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	grafanaprom "github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

func main() {
	rules := flag.String("rules", "", "the PrometheusRule (YAML)")
	groupsOut := flag.String("groups-out", "", "where to write the PrometheusRule's groups as a Prometheus rule file")
	dashboards := flag.String("dashboards", "", "Grafana dashboards (JSON), comma-separated")
	docs := flag.String("metrics", "docs/metrics.md", "the document whose tables list the metrics the manager exports")
	flag.Parse()
	known, err := documentedMetrics(*docs)
	if err == nil {
		err = errors.Join(checkRules(*rules, *groupsOut, known), checkDashboards(strings.Split(*dashboards, ","), known))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// prometheusSeries are the series Prometheus makes itself, not read from the manager: a target's
// up, and the alerts' own.
var prometheusSeries = map[string]bool{"up": true, "ALERTS": true, "ALERTS_FOR_STATE": true}

// documentedRow is a row of a metrics table: | `name` | type | ...
var documentedRow = regexp.MustCompile("(?m)^\\| `([a-zA-Z_:][a-zA-Z0-9_:]*)` \\| (counter|gauge|histogram|summary) \\|")

// documentedMetrics returns the series names the tables of docs/metrics.md give: a histogram's
// (or summary's) name stands for its _bucket, _sum and _count series.
func documentedMetrics(file string) (map[string]bool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	known := map[string]bool{}
	for _, m := range documentedRow.FindAllStringSubmatch(string(data), -1) {
		known[m[1]] = true
		if m[2] == "histogram" || m[2] == "summary" {
			known[m[1]+"_bucket"], known[m[1]+"_sum"], known[m[1]+"_count"] = true, true, true
		}
	}
	if len(known) == 0 {
		return nil, fmt.Errorf("%s: no table rows of metrics (| `name` | type | ...)", file)
	}
	return known, nil
}

// checkExpr parses a PromQL expression and checks that each series it selects is known.
func checkExpr(where, expr string, known map[string]bool) error {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	var errs []error
	parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
		if vs, ok := node.(*parser.VectorSelector); ok {
			switch {
			case vs.Name == "":
				errs = append(errs, fmt.Errorf("%s: a selector without a metric name: %s", where, vs))
			case !known[vs.Name] && !prometheusSeries[vs.Name]:
				errs = append(errs, fmt.Errorf("%s: metric %s is not in docs/metrics.md's tables: the manager does not export it", where, vs.Name))
			}
		}
		return nil
	})
	return errors.Join(errs...)
}

// prometheusRule is what the check reads of a PrometheusRule; the groups are kept as they are
// written, to be handed to promtool whole.
type prometheusRule struct {
	Kind string `yaml:"kind"`
	Spec struct {
		Groups yaml.Node `yaml:"groups"`
	} `yaml:"spec"`
}

type ruleGroup struct {
	Name  string `yaml:"name"`
	Rules []struct {
		Alert       string            `yaml:"alert"`
		Record      string            `yaml:"record"`
		Expr        string            `yaml:"expr"`
		Labels      map[string]string `yaml:"labels"`
		Annotations map[string]string `yaml:"annotations"`
	} `yaml:"rules"`
}

// checkRules checks a PrometheusRule's rules and writes its groups to groupsOut.
func checkRules(file, groupsOut string, known map[string]bool) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var pr prometheusRule
	if err := yaml.Unmarshal(data, &pr); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if pr.Kind != "PrometheusRule" || pr.Spec.Groups.Kind != yaml.SequenceNode {
		return fmt.Errorf("%s: not a PrometheusRule with spec.groups", file)
	}
	var groups []ruleGroup
	if err := pr.Spec.Groups.Decode(&groups); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	// Recorded series are known to the rules that read them.
	for _, g := range groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				known[r.Record] = true
			}
		}
	}
	var errs []error
	for _, g := range groups {
		for _, r := range g.Rules {
			where := fmt.Sprintf("%s: group %s, rule %s%s", file, g.Name, r.Alert, r.Record)
			errs = append(errs, checkExpr(where, r.Expr, known))
			if r.Alert == "" {
				continue
			}
			if r.Labels["severity"] == "" {
				errs = append(errs, fmt.Errorf("%s: no severity label", where))
			}
			for _, a := range []string{"summary", "description"} {
				if r.Annotations[a] == "" {
					errs = append(errs, fmt.Errorf("%s: no %s annotation", where, a))
				}
			}
		}
	}
	out, err := yaml.Marshal(map[string]*yaml.Node{"groups": &pr.Spec.Groups})
	if err != nil {
		return err
	}
	return errors.Join(append(errs, os.WriteFile(groupsOut, out, 0o644))...)
}

// grafanaIntervals are Grafana's interval variables, which a query may use where PromQL takes a
// duration; Grafana replaces them before Prometheus sees the query.
var grafanaIntervals = strings.NewReplacer("$__rate_interval", "5m", "${__rate_interval}", "5m",
	"$__interval", "1m", "${__interval}", "1m", "$__range", "1h", "${__range}", "1h")

// checkDashboards decodes each dashboard strictly, as Grafana's schema says it, and checks its
// queries.
func checkDashboards(files []string, known map[string]bool) error {
	// Without the plugins, panels' options and queries do not decode.
	plugins.RegisterDefaultPlugins()
	var errs []error
	for _, file := range files {
		errs = append(errs, checkDashboard(file, known))
	}
	return errors.Join(errs...)
}

func checkDashboard(file string, known map[string]bool) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	// encoding/json first, for a syntax error's offset; the SDK's strict decoding says only which
	// field is wrong.
	if !json.Valid(data) {
		var v any
		return fmt.Errorf("%s: %w", file, json.NewDecoder(bytes.NewReader(data)).Decode(&v))
	}
	var strict, d dashboard.Dashboard
	if err := failed(strict.UnmarshalJSONStrict(data)); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	// The strict decoding checks every panel but keeps none: a panel's own strict decoding
	// returns its typed nil, which the panel list takes for an error and drops the panel. The
	// plain decoding, of the same types, keeps them.
	if err := json.Unmarshal(data, &d); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if err := failed(d.Validate()); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if d.Uid == nil || d.Title == nil {
		return fmt.Errorf("%s: a dashboard needs a uid and a title, to be imported and found again", file)
	}
	var panels []dashboard.Panel
	for _, p := range d.Panels {
		switch {
		case p.Panel != nil:
			panels = append(panels, *p.Panel)
		case p.RowPanel != nil:
			panels = append(panels, p.RowPanel.Panels...)
		}
	}
	if len(panels) == 0 {
		return fmt.Errorf("%s: no panels decoded", file)
	}
	var errs []error
	ids := map[uint32]bool{}
	for _, p := range panels {
		title := ""
		if p.Title != nil {
			title = *p.Title
		}
		where := fmt.Sprintf("%s: panel %q", file, title)
		if p.Id == nil || ids[*p.Id] {
			errs = append(errs, fmt.Errorf("%s: no id, or another panel's", where))
		} else {
			ids[*p.Id] = true
		}
		for i, t := range p.Targets {
			q, ok := t.(*grafanaprom.Dataquery)
			if !ok {
				errs = append(errs, fmt.Errorf("%s: target %d is not a Prometheus query (the panel's datasource must be of type prometheus)", where, i))
				continue
			}
			errs = append(errs, checkExpr(fmt.Sprintf("%s, target %d", where, i), grafanaIntervals.Replace(q.Expr), known))
		}
	}
	return errors.Join(errs...)
}

// failed is an error of the SDK, or nil: its decoding and validation return a typed nil
// (cog.BuildErrors) on success, an error that is not nil and says nothing.
func failed(err error) error {
	if err == nil || err.Error() == "" {
		return nil
	}
	return err
}
