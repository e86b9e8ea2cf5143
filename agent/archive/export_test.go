package archive

// NewDirLinkingWith is NewDir with link in place of os.Link: a test
// stands in a file system that refuses hard links.
func NewDirLinkingWith(dir string, link func(oldname, newname string) error) (*Dir, error) {
	d, err := NewDir(dir)
	if err != nil {
		return nil, err
	}
	d.link = link
	return d, nil
}
