package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docRef matches a document a comment or a README names: a path ending in
// .md (README.md files of the repository included).
var docRef = regexp.MustCompile(`[A-Za-z0-9_./-]*[A-Za-z0-9_-]\.md\b`)

// TestCitedDocumentsExist: every .md file that the code, the scripts or
// the READMEs name is in the repository, so a clone holds the documents its
// code leans on (docs/README.md). A name is looked up as written, from the
// repository root, from docs/ and beside the citing file.
func TestCitedDocumentsExist(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if strings.HasPrefix(name, ".") && path != root || name == "testdata" || name == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, ".sh") && !strings.HasSuffix(name, ".md") &&
			!strings.HasSuffix(name, ".yaml") && name != "Makefile" {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, ref := range docRef.FindAllString(string(data), -1) {
			if !docExists(root, filepath.Dir(path), ref) {
				rel, _ := filepath.Rel(root, path)
				missing = append(missing, rel+": "+ref)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range missing {
		t.Errorf("names a document that is not in the repository: %s", m)
	}
}

func docExists(root, dir, ref string) bool {
	ref = strings.TrimPrefix(ref, "./")
	if strings.HasPrefix(ref, "/") || strings.HasPrefix(ref, "usr/") {
		return true // an installed path (the package's doc dir), not a citation
	}
	for _, base := range []string{root, filepath.Join(root, "docs"), dir} {
		if _, err := os.Stat(filepath.Join(base, ref)); err == nil {
			return true
		}
	}
	return false
}
