package outbox_test

import (
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// The docs must stand on their own: every relative link in README.md,
// CHANGELOG.md and docs/*.md names a file of the repository (and, for a
// Markdown file, a heading it has), and no file names a Markdown document
// the repository does not hold.

var (
	// inlineLink matches [text](target) and ![alt](target), the text
	// possibly spanning lines; group 1 is the target, without a title.
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	// referenceLink matches a reference definition: [name]: target.
	referenceLink = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:\s+<?(\S+?)>?(?:\s+"[^"]*")?\s*$`)
	// codeSpan matches inline code, whose brackets are not links.
	codeSpan = regexp.MustCompile("`[^`\n]*`")
	// headingLine matches an ATX heading; group 1 is its text.
	headingLine = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	// htmlAnchor matches <a name="x"> or <a id="x">.
	htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	// urlScheme matches a link with a scheme (https:, mailto:, ...).
	urlScheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	// markdownName matches a mention of a Markdown file in any text.
	markdownName = regexp.MustCompile(`[A-Za-z0-9_./-]*[A-Za-z0-9_]\.md\b`)
)

// docFiles are the Markdown files whose links are checked, relative to the
// repository root.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "CHANGELOG.md"}
	more, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append(files, more...)
}

// withoutFences returns the Markdown text with its fenced code blocks
// blanked (their lines kept, so that line numbers hold).
func withoutFences(text string) string {
	lines := strings.Split(text, "\n")
	fence := ""
	for i, line := range lines {
		trimmed := strings.TrimLeft(line, " ")
		switch {
		case fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")):
			fence = trimmed[:3]
			lines[i] = ""
		case fence != "":
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			lines[i] = ""
		}
	}
	return strings.Join(lines, "\n")
}

// headingSlug is the anchor GitHub gives a heading: lower case, markup and
// punctuation dropped, spaces turned into hyphens.
func headingSlug(heading string) string {
	heading = inlineLink.ReplaceAllStringFunc(heading, func(link string) string {
		return link[strings.Index(link, "[")+1 : strings.Index(link, "]")]
	})
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// anchorsOf lists the anchors a Markdown file offers: one per heading
// (a repeated heading gets -1, -2, ...) and each HTML anchor.
func anchorsOf(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, line := range strings.Split(withoutFences(text), "\n") {
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			anchors[m[1]] = true
		}
		m := headingLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		slug := headingSlug(m[1])
		if n := seen[slug]; n > 0 {
			anchors[slug+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors
}

// inRepository reports whether path names a file or directory that exists
// inside the repository rooted at root.
func inRepository(root, path string) bool {
	abs, err := filepath.Abs(path)
	if err != nil || abs != root && !strings.HasPrefix(abs, root+string(filepath.Separator)) {
		return false
	}
	_, err = os.Stat(abs)
	return err == nil
}

// lineOf is the 1-based line of offset in text.
func lineOf(text string, offset int) int {
	return strings.Count(text[:offset], "\n") + 1
}

// TestDocsLinksResolve checks every relative link of the docs.
func TestDocsLinksResolve(t *testing.T) {
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	anchorCache := map[string]map[string]bool{}
	anchors := func(path string) map[string]bool {
		if a, ok := anchorCache[path]; ok {
			return a
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		anchorCache[path] = anchorsOf(string(data))
		return anchorCache[path]
	}
	checked := 0
	for _, doc := range docFiles(t) {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatalf("read %s: %v", doc, err)
		}
		text := codeSpan.ReplaceAllString(withoutFences(string(data)), "code")
		var targets [][]int
		targets = append(targets, inlineLink.FindAllStringSubmatchIndex(text, -1)...)
		targets = append(targets, referenceLink.FindAllStringSubmatchIndex(text, -1)...)
		for _, m := range targets {
			target := text[m[2]:m[3]]
			where := doc + ":" + strconv.Itoa(lineOf(text, m[2]))
			if target == "" || urlScheme.MatchString(target) || strings.HasPrefix(target, "//") {
				continue
			}
			checked++
			pathPart, fragment, _ := strings.Cut(target, "#")
			pathPart, err := url.PathUnescape(pathPart)
			if err != nil {
				t.Errorf("%s: link %q is not valid URL escaping: %v", where, target, err)
				continue
			}
			dest := doc
			if pathPart != "" {
				dest = filepath.Join(filepath.Dir(doc), filepath.FromSlash(pathPart))
			}
			abs, err := filepath.Abs(dest)
			if err != nil {
				t.Fatal(err)
			}
			if abs != root && !strings.HasPrefix(abs, root+string(filepath.Separator)) {
				t.Errorf("%s: link %q leaves the repository", where, target)
				continue
			}
			info, err := os.Stat(dest)
			if err != nil {
				t.Errorf("%s: link %q names no file of the repository (%s)", where, target, filepath.ToSlash(dest))
				continue
			}
			if fragment == "" || info.IsDir() || !strings.HasSuffix(dest, ".md") {
				continue
			}
			if !anchors(dest)[fragment] {
				t.Errorf("%s: link %q names no heading of %s (no #%s)", where, target, filepath.ToSlash(dest), fragment)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found: the link pattern no longer matches the docs")
	}
}

// TestNoMarkdownOutsideTheRepository checks that a Markdown file named in
// a doc, a comment, a migration or a script is one the repository holds,
// relative to the naming file or to the repository root: the docs and the
// code never send a reader to a document they cannot open.
func TestNoMarkdownOutsideTheRepository(t *testing.T) {
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	texts := map[string]bool{".md": true, ".go": true, ".sql": true, ".sh": true, ".yaml": true, ".yml": true}
	named := 0
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") && d.Name() != ".ci" || d.Name() == "node_modules" || d.Name() == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !texts[filepath.Ext(path)] && filepath.Dir(path) != ".ci" {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		text := string(data)
		for _, m := range markdownName.FindAllStringIndex(text, -1) {
			name := filepath.FromSlash(text[m[0]:m[1]])
			named++
			if inRepository(root, filepath.Join(filepath.Dir(path), name)) || inRepository(root, name) {
				continue
			}
			t.Errorf("%s:%d: names %s, which the repository does not hold: say what it says, or link a file of the repository",
				filepath.ToSlash(path), lineOf(text, m[0]), filepath.ToSlash(name))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if named == 0 {
		t.Fatal("no Markdown file named anywhere: the pattern no longer matches")
	}
}
