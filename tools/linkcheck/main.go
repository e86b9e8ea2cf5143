// Command linkcheck fails when a relative link in Rivora's Markdown does
// not resolve: the file (or directory) it names must exist, and an anchor
// (#slug) must be the GitHub-style slug of a heading in the target page.
// External links (any URL with a scheme: http, https, mailto …) are
// skipped; nothing goes over the network. Links inside code (fenced
// blocks and `spans`) are not links and are ignored.
//
//	go run ./tools/linkcheck README.md docs
//
// Each argument is a Markdown file or a directory searched for *.md
// files. A broken link is reported as file:line and the exit status is 1.
package main

import (
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

// link is one relative link found in a Markdown file.
type link struct {
	file   string
	line   int
	target string
}

var (
	// inlineLink matches [text](target) and ![alt](target), with an
	// optional "title" after the target.
	inlineLink = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// refLink matches a reference definition: [name]: target
	refLink = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?`)
	// codeSpan matches an inline code span.
	codeSpan = regexp.MustCompile("`+[^`]*`+")
	// scheme matches a URL's scheme: such a link is external.
	scheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	// heading matches an ATX heading; group 1 is its text.
	heading = regexp.MustCompile(`^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$`)
	// linkText reduces [text](target) to text in a heading.
	linkText = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: linkcheck FILE.md|DIR ...")
		os.Exit(2)
	}
	files, err := markdownFiles(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "linkcheck:", err)
		os.Exit(2)
	}
	broken := 0
	for _, f := range files {
		links, err := linksIn(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, "linkcheck:", err)
			os.Exit(2)
		}
		for _, l := range links {
			if problem := check(l); problem != "" {
				fmt.Printf("%s:%d: broken link %q: %s\n", l.file, l.line, l.target, problem)
				broken++
			}
		}
	}
	if broken > 0 {
		fmt.Printf("linkcheck: %d broken link(s) in %d file(s) checked\n", broken, len(files))
		os.Exit(1)
	}
	fmt.Printf("linkcheck: %d file(s), every relative link resolves\n", len(files))
}

// markdownFiles expands the arguments: a file is taken as is, a directory
// gives every *.md file under it.
func markdownFiles(args []string) ([]string, error) {
	var files []string
	for _, arg := range args {
		info, err := os.Stat(arg)
		if err != nil {
			return nil, err
		}
		if !info.IsDir() {
			files = append(files, arg)
			continue
		}
		err = filepath.WalkDir(arg, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
				files = append(files, path)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return files, nil
}

// proseLines returns a Markdown file's lines with fenced code blocks
// blanked out, so line numbers stay true and code is never read as links
// or headings.
func proseLines(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(string(data), "\n")
	fence := ""
	for i, line := range lines {
		trimmed := strings.TrimLeft(line, " ")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			lines[i] = ""
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			lines[i] = ""
		}
	}
	return lines, nil
}

// linksIn returns the relative links of a Markdown file.
func linksIn(path string) ([]link, error) {
	lines, err := proseLines(path)
	if err != nil {
		return nil, err
	}
	var links []link
	for i, line := range lines {
		line = codeSpan.ReplaceAllString(line, "")
		var targets []string
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			targets = append(targets, m[1])
		}
		if m := refLink.FindStringSubmatch(line); m != nil {
			targets = append(targets, m[1])
		}
		for _, t := range targets {
			if scheme.MatchString(t) {
				continue
			}
			links = append(links, link{file: path, line: i + 1, target: t})
		}
	}
	return links, nil
}

// check returns what is wrong with a link, or "" when it resolves.
func check(l link) string {
	target, anchor, _ := strings.Cut(l.target, "#")
	target, err := url.PathUnescape(target)
	if err != nil {
		return "bad escape in path"
	}
	dest := l.file
	if target != "" {
		dest = filepath.Join(filepath.Dir(l.file), filepath.FromSlash(target))
		if _, err := os.Stat(dest); err != nil {
			return dest + " does not exist"
		}
	}
	if anchor == "" || !strings.HasSuffix(dest, ".md") {
		return ""
	}
	slugs, err := headingSlugs(dest)
	if err != nil {
		return err.Error()
	}
	if !slugs[anchor] {
		return fmt.Sprintf("%s has no heading with anchor #%s", dest, anchor)
	}
	return ""
}

// headingSlugs returns the anchors GitHub gives a page's headings: the
// slug of each, and slug-1, slug-2 … for repeats.
func headingSlugs(path string) (map[string]bool, error) {
	lines, err := proseLines(path)
	if err != nil {
		return nil, err
	}
	slugs := map[string]bool{}
	seen := map[string]int{}
	for _, line := range lines {
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			slugs[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			slugs[s] = true
		}
		seen[s]++
	}
	return slugs, nil
}

// slug is GitHub's anchor for a heading's text: links reduced to their
// text, lower case, every character but letters, digits, spaces, hyphens
// and underscores dropped, then spaces turned into hyphens.
func slug(text string) string {
	text = linkText.ReplaceAllString(text, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
