// Package docs checks the documentation as a reader meets it on a fresh clone.
package docs

import (
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	// link is a Markdown link or image: [text](target) or ![alt](target), with an optional title.
	link = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	// heading is a Markdown heading, outside code blocks.
	heading = regexp.MustCompile(`^#{1,6}\s+(.+?)\s*#*\s*$`)
	// unslugged are the characters GitHub drops from a heading's anchor.
	unslugged = regexp.MustCompile(`[^\p{L}\p{N}\s_-]`)
	// inlineCode is code in a line, where brackets are not links.
	inlineCode = regexp.MustCompile("`[^`]*`")
)

// TestEveryLinkedFileIsInGit: every file or image that the README or a doc links to is in git,
// and every anchor it links to is a heading of its page: a fresh clone shows what the docs show.
func TestEveryLinkedFileIsInGit(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	out, err := exec.Command("git", "-C", root, "ls-files").Output()
	require.NoError(t, err)
	tracked := map[string]bool{}
	for _, f := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		tracked[f] = true
		for dir := path.Dir(f); dir != "."; dir = path.Dir(dir) {
			tracked[dir] = true // A link to a folder: one of its files is tracked.
		}
	}
	var pages []string
	for f := range tracked {
		if strings.HasSuffix(f, ".md") && !strings.HasPrefix(f, "bin/") {
			pages = append(pages, f)
		}
	}
	require.Contains(t, pages, "README.md")
	anchors := map[string]map[string]bool{}
	anchorsOf := func(page string) map[string]bool {
		if a, ok := anchors[page]; ok {
			return a
		}
		a := headingAnchors(t, filepath.Join(root, page))
		anchors[page] = a
		return a
	}
	links := 0
	for _, page := range pages {
		data, err := os.ReadFile(filepath.Join(root, page))
		require.NoError(t, err)
		for _, m := range link.FindAllStringSubmatch(withoutCode(string(data)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links++
			file, fragment, _ := strings.Cut(target, "#")
			if file == "" {
				file = page
			} else {
				file = path.Clean(path.Join(path.Dir(page), file))
			}
			if !assert.True(t, tracked[file], "%s links to %s, which is not in git", page, target) {
				continue
			}
			if fragment != "" && strings.HasSuffix(file, ".md") {
				assert.True(t, anchorsOf(file)[fragment], "%s links to %s: no such heading in %s", page, target, file)
			}
		}
	}
	assert.Greater(t, links, 100, "the docs' links were not found")
}

// withoutCode drops fenced code blocks and inline code, where brackets are not links.
func withoutCode(text string) string {
	var b strings.Builder
	fenced := false
	for line := range strings.Lines(text) {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			b.WriteString(inlineCode.ReplaceAllString(line, ""))
		}
	}
	return b.String()
}

// headingAnchors are the anchors GitHub gives a page's headings: lower case, punctuation dropped,
// spaces made hyphens, a repeated one numbered.
func headingAnchors(t *testing.T, file string) map[string]bool {
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	anchors, seen := map[string]bool{}, map[string]int{}
	fenced := false
	for line := range strings.Lines(string(data)) {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
		}
		m := heading.FindStringSubmatch(strings.TrimRight(line, "\n"))
		if fenced || m == nil {
			continue
		}
		text := link.ReplaceAllStringFunc(m[1], func(l string) string { return l[strings.Index(l, "[")+1 : strings.Index(l, "]")] })
		slug := strings.ReplaceAll(unslugged.ReplaceAllString(strings.ToLower(text), ""), " ", "-")
		if n := seen[slug]; n > 0 {
			anchors[slug+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors
}
