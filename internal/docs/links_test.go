package docs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// fenceRE opens or closes a fenced code block: up to three spaces, then
// three or more backquotes or tildes.
var fenceRE = regexp.MustCompile("^ {0,3}(```+|~~~+)")

// proseLines returns text's lines outside fenced code blocks, with their
// 1-based numbers; lines inside are returned as "".
func proseLines(text string) []string {
	lines := strings.Split(text, "\n")
	out := make([]string, len(lines))
	fence := ""
	for i, l := range lines {
		if m := fenceRE.FindStringSubmatch(l); m != nil {
			switch {
			case fence == "":
				fence = m[1]
				continue
			case m[1][0] == fence[0] && len(m[1]) >= len(fence) && strings.TrimSpace(l[len(m[0]):]) == "":
				fence = ""
				continue
			}
		}
		if fence == "" {
			out[i] = l
		}
	}
	return out
}

var (
	atxRE      = regexp.MustCompile(`^ {0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	setextRE   = regexp.MustCompile(`^ {0,3}(?:=+|-+)[ \t]*$`)
	inlineLink = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTag    = regexp.MustCompile(`<[^>]*>`)
	htmlID     = regexp.MustCompile(`<a\s[^>]*?(?:name|id)="([^"]+)"|\sid="([^"]+)"`)
)

// slug is GitHub's anchor for a heading's text (github-slugger): the text as
// rendered (links by their text, HTML tags dropped), lower-cased, with
// every character but letters, marks, digits, "-", "_" and spaces removed,
// and each space replaced by "-".
func slug(heading string) string {
	heading = inlineLink.ReplaceAllString(heading, "$1")
	heading = htmlTag.ReplaceAllString(heading, "")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r) || unicode.IsMark(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// anchors are the anchors of a Markdown document as GitHub renders it: its
// headings' (ATX and setext, outside code blocks; a repeated slug gets -1,
// -2, ...) and the ids of its HTML elements (<a name="x">, id="x").
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	add := func(title string) {
		s := slug(strings.TrimSpace(title))
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	lines := proseLines(text)
	for i, l := range lines {
		if m := atxRE.FindStringSubmatch(l); m != nil {
			add(m[1])
			continue
		}
		// A setext underline makes the paragraph line above it a heading.
		if i > 0 && setextRE.MatchString(l) && strings.TrimSpace(lines[i-1]) != "" &&
			!atxRE.MatchString(lines[i-1]) && !strings.HasPrefix(strings.TrimSpace(lines[i-1]), "|") &&
			!strings.HasPrefix(strings.TrimSpace(lines[i-1]), "- ") && !strings.HasPrefix(strings.TrimSpace(lines[i-1]), "* ") {
			add(lines[i-1])
		}
		for _, m := range htmlID.FindAllStringSubmatch(l, -1) {
			out[m[1]+m[2]] = true
		}
	}
	return out
}

var (
	codeSpanRE = regexp.MustCompile("`+[^`]*`+")
	// linkRE finds inline links and images: ](dest), ](<dest>) and
	// ](dest "title").
	linkRE = regexp.MustCompile(`\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+(?:"[^"]*"|'[^']*'|\([^)]*\)))?\s*\)`)
	// refDefRE finds link reference definitions: [label]: dest.
	refDefRE = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)`)
	// hrefRE finds HTML links and pictures.
	hrefRE = regexp.MustCompile(`\s(?:href|src)="([^"]+)"`)
)

// links returns the link destinations of a Markdown document, outside
// code, with their line numbers.
func links(text string) (dests []string, lines []int) {
	for i, l := range proseLines(text) {
		l = codeSpanRE.ReplaceAllString(l, "")
		var found []string
		for _, m := range linkRE.FindAllStringSubmatch(l, -1) {
			found = append(found, m[1])
		}
		if m := refDefRE.FindStringSubmatch(l); m != nil {
			found = append(found, m[1])
		}
		for _, m := range hrefRE.FindAllStringSubmatch(l, -1) {
			found = append(found, m[1])
		}
		for _, d := range found {
			dests = append(dests, strings.Trim(d, "<>"))
			lines = append(lines, i+1)
		}
	}
	return dests, lines
}

// linkedFiles are the documents whose links are checked: README.md, the
// other Markdown files at the root, and docs/*.md.
func linkedFiles(t *testing.T) []string {
	t.Helper()
	files := markdownFiles(t)
	more, err := filepath.Glob(filepath.Join(root, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range more {
		if rel, _ := filepath.Rel(root, f); !slices.Contains(files, rel) {
			files = append(files, rel)
		}
	}
	return files
}

// checkTarget reports what is wrong with the link target, written in the
// file from (relative to root), or "" when it resolves: a file that exists
// and, with a #fragment, a Markdown file with that anchor.
func checkTarget(from, target string) string {
	file, frag, _ := strings.Cut(target, "#")
	rel := from
	if file != "" {
		rel = filepath.ToSlash(filepath.Join(filepath.Dir(from), file))
		if strings.HasPrefix(file, "/") {
			rel = strings.TrimPrefix(file, "/")
		}
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel))); err != nil {
			return rel + " does not exist"
		}
	}
	if frag == "" {
		return ""
	}
	if !strings.HasSuffix(rel, ".md") {
		return rel + " is not a Markdown document; it has no #" + frag
	}
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		return err.Error()
	}
	if !anchors(string(b))[frag] {
		return rel + " has no heading #" + frag
	}
	return ""
}

// TestLinks: every relative link of README.md, the other root documents
// and docs/*.md names a file that exists and, with a #fragment, a heading
// (by GitHub's anchor rules) or an HTML id of that file.
func TestLinks(t *testing.T) {
	t.Parallel()
	checked := 0
	for _, f := range linkedFiles(t) {
		dests, lines := links(read(t, f))
		for i, target := range dests {
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			if problem := checkTarget(f, target); problem != "" {
				t.Errorf("%s:%d: link %s: %s", f, lines[i], target, problem)
			}
		}
	}
	if checked < 40 {
		t.Fatalf("checked %d links; the patterns no longer find them", checked)
	}
}

// TestSlug: GitHub's anchors, as github-slugger computes them.
func TestSlug(t *testing.T) {
	t.Parallel()
	for heading, want := range map[string]string{
		"Front your own API":                     "front-your-own-api",
		"Choosing the identity":                  "choosing-the-identity",
		"`idempotency.in_progress` and waiting":  "idempotencyin_progress-and-waiting",
		"What's new? (0.2.0)":                    "whats-new-020",
		"[Admin API](operations.md#admin-api)":   "admin-api",
		"Redis persistence and its limits":       "redis-persistence-and-its-limits",
		"Guarantees — and their limits":          "guarantees--and-their-limits",
		"<a name=\"x\"></a>Upgrading":            "upgrading",
		"Ünïcode Straße":                         "ünïcode-straße",
		"IdemgateStoreUnavailable":               "idemgatestoreunavailable",
		"**Bold** _and_ emphasis":                "bold-_and_-emphasis",
		"Two  spaces":                            "two--spaces",
		"1. Numbered":                            "1-numbered",
		"a/b: c.d":                               "ab-cd",
		"Reloading the config (SIGHUP, inotify)": "reloading-the-config-sighup-inotify",
	} {
		if got := slug(heading); got != want {
			t.Errorf("slug(%q) = %q; want %q", heading, got, want)
		}
	}
}

// TestAnchors: headings in every form GitHub renders, repeated headings
// numbered, HTML ids, and nothing from code blocks.
func TestAnchors(t *testing.T) {
	t.Parallel()
	doc := strings.Join([]string{
		"# Title",
		"## Closed heading ##",
		"   ### Indented",
		"#NotAHeading",
		"Setext one",
		"==========",
		"Setext two",
		"---",
		"## Title",
		"## Title",
		"```sh",
		"# a comment, not a heading",
		"```",
		"~~~",
		"## Inside tildes",
		"~~~",
		"<a name=\"runbook-x\"></a>",
		"<div id=\"box\"></div>",
		"| a |",
		"|---|",
	}, "\n")
	got := anchors(doc)
	for _, want := range []string{"title", "closed-heading", "indented", "setext-one", "setext-two", "title-1", "title-2", "runbook-x", "box"} {
		if !got[want] {
			t.Errorf("anchors lack #%s: %v", want, got)
		}
	}
	for _, not := range []string{"notaheading", "a-comment-not-a-heading", "inside-tildes", "a", "title-3"} {
		if got[not] {
			t.Errorf("anchors have #%s: %v", not, got)
		}
	}
}

// TestLinkForms: inline links with titles and angle brackets, images,
// reference definitions and HTML hrefs are found; code is not.
func TestLinkForms(t *testing.T) {
	t.Parallel()
	doc := strings.Join([]string{
		"See [a](a.md), [b](<b c.md>) and [c](c.md \"title\"), ![pic](docs/x.svg).",
		"`[not](code.md)` and [d](d.md#frag).",
		"[ref]: e.md#x",
		"<a href=\"f.md\">f</a> <img src=\"g.svg\">",
		"```",
		"[no](fenced.md)",
		"```",
	}, "\n")
	got, lines := links(doc)
	want := []string{"a.md", "b c.md", "c.md", "docs/x.svg", "d.md#frag", "e.md#x", "f.md", "g.svg"}
	if !slices.Equal(got, want) {
		t.Errorf("links = %q; want %q", got, want)
	}
	if !slices.Equal(lines, []int{1, 1, 1, 1, 2, 3, 4, 4}) {
		t.Errorf("lines = %v", lines)
	}
	if p := checkTarget("README.md", "docs/config.md#no-such-heading"); !strings.Contains(p, "has no heading") {
		t.Errorf("checkTarget(missing anchor) = %q", p)
	}
	if p := checkTarget("docs/config.md", "../README.md#prerequisites"); p != "" {
		t.Errorf("checkTarget(good) = %q", p)
	}
	if p := checkTarget("README.md", "docs/nope.md"); !strings.Contains(p, "does not exist") {
		t.Errorf("checkTarget(missing file) = %q", p)
	}
}

// sectionRefRE finds references to a document's section outside Markdown
// links: docs/config.md#choosing-the-identity, a GitHub URL of this
// repository with a #fragment, or README, "Choosing the identity".
var (
	anchorRefRE = regexp.MustCompile(`(?:github\.com/idemgate/idemgate/blob/main/)?\b((?:docs/)?[A-Za-z]+\.md)#([\w-]+)`)
	titleRefRE  = regexp.MustCompile(`\b((?:docs/)?[A-Za-z]+(?:\.md)?),? \(?"([A-Z][^"]+)"`)
)

// TestSectionReferences: the code, configs, charts and monitoring files
// that name a section of the documentation (docs/operations.md#metrics,
// README, "Choosing the identity", an alert's runbook_url) name one that
// exists.
func TestSectionReferences(t *testing.T) {
	t.Parallel()
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if name == ".git" || name == "testdata" || name == "bin" || name == ".tmp" || name == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		ext := filepath.Ext(name)
		if !slices.Contains([]string{".go", ".yaml", ".yml", ".json", ".tpl", ".txt", ".sh", ".dot"}, ext) && name != "Makefile" && name != "Dockerfile" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if strings.HasPrefix(rel, "internal/docs/") {
			return nil // this package's own examples
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range anchorRefRE.FindAllStringSubmatch(line, -1) {
				doc := m[1]
				if _, err := os.Stat(filepath.Join(root, doc)); err != nil {
					continue // a file name in another context
				}
				checked++
				if p := checkTarget("x.md", doc+"#"+m[2]); p != "" {
					t.Errorf("%s:%d: %s#%s: %s", rel, i+1, doc, m[2], p)
				}
			}
			for _, m := range titleRefRE.FindAllStringSubmatch(line, -1) {
				doc := m[1]
				if !strings.HasSuffix(doc, ".md") {
					doc += ".md"
				}
				if doc != "README.md" && !strings.HasPrefix(doc, "docs/") {
					continue
				}
				checked++
				if p := checkTarget("x.md", doc+"#"+slug(m[2])); p != "" {
					t.Errorf("%s:%d: %s, %q: %s", rel, i+1, m[1], m[2], p)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 10 {
		t.Fatalf("checked %d references; the patterns no longer find them", checked)
	}
}
