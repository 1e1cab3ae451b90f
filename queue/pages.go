package queue

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"slices"
	"strings"
)

// A reader of bbolt's file format that trusts nothing it reads: every page
// is read with ReadAt into its own buffer and every offset is checked
// before use, so a damaged file yields a list of problems, never a panic
// or a fault (bbolt itself reads the file through its memory map and
// asserts). Check and Recover walk the file with it.

// The on-disk constants of bbolt's format (go.etcd.io/bbolt/internal/common).
const (
	boltMagic      = 0xED0CDAED
	boltVersion    = 2
	pageHeaderSize = 16 // id u64, flags u16, count u16, overflow u32
	elementSize    = 16 // branch: pos, ksize u32, pgid u64; leaf: flags, pos, ksize, vsize u32
	metaSize       = 64 // magic, version, pageSize, flags u32; root, sequence, freelist, pgid, txid, checksum u64
	noFreelist     = ^uint64(0)

	flagBranch   = 0x01
	flagLeaf     = 0x02
	flagMeta     = 0x04
	flagFreelist = 0x10
	bucketLeaf   = 0x01

	maxProblems = 20 // problems kept in a report; the rest are counted
	maxDepth    = 64 // deeper than any real tree: a loop of pages ends here
)

// native is bbolt's byte order: it writes its structs from memory as they are.
var native = binary.NativeEndian

// boltMeta is the meta page in force (the valid one with the higher txid).
type boltMeta struct {
	pageSize uint32
	root     uint64
	freelist uint64
	hwm      uint64 // the high-water mark: pages [0, hwm) are in use or free
	txid     uint64
}

// pageFile is a bbolt file open for reading.
type pageFile struct {
	r    io.ReaderAt
	size int64
	meta boltMeta
}

// problems collects what a walk finds wrong, the first maxProblems in full.
type problems struct {
	list []string
	more int
}

func (p *problems) add(format string, a ...any) {
	if len(p.list) < maxProblems {
		p.list = append(p.list, fmt.Sprintf(format, a...))
		return
	}
	p.more++
}

func (p *problems) n() int { return len(p.list) + p.more }

// readMeta reads both meta pages and returns the one bbolt would use.
func readMeta(r io.ReaderAt, size int64) (boltMeta, error) {
	var buf [metaSize]byte
	parse := func(off int64, pageSize uint32) (boltMeta, bool) {
		if off+pageHeaderSize+metaSize > size {
			return boltMeta{}, false
		}
		if _, err := r.ReadAt(buf[:], off+pageHeaderSize); err != nil {
			return boltMeta{}, false
		}
		h := fnv.New64a()
		h.Write(buf[:56])
		m := boltMeta{
			pageSize: native.Uint32(buf[8:]), root: native.Uint64(buf[16:]),
			freelist: native.Uint64(buf[32:]), hwm: native.Uint64(buf[40:]), txid: native.Uint64(buf[48:]),
		}
		ok := native.Uint32(buf[0:]) == boltMagic && native.Uint32(buf[4:]) == boltVersion &&
			native.Uint64(buf[56:]) == h.Sum64() && m.pageSize >= 512 && m.pageSize <= 1<<20 &&
			(pageSize == 0 || m.pageSize == pageSize)
		return m, ok
	}
	m0, ok0 := parse(0, 0)
	var m1 boltMeta
	ok1 := false
	if ok0 {
		m1, ok1 = parse(int64(m0.pageSize), m0.pageSize)
	} else {
		// The first meta page is lost: the second one says its page size.
		for _, ps := range []uint32{4096, 8192, 16384, 65536, 1024, 2048, 32768, 512} {
			if m1, ok1 = parse(int64(ps), ps); ok1 {
				break
			}
		}
	}
	switch {
	case ok0 && ok1 && m1.txid > m0.txid, !ok0 && ok1:
		return m1, nil
	case ok0:
		return m0, nil
	}
	return boltMeta{}, errors.New("neither of its two meta pages is valid (not a bbolt file, or both overwritten)")
}

// openPages reads the meta page of the bbolt file r of size bytes and
// checks that the pages it names lie inside the file.
func openPages(r io.ReaderAt, size int64) (*pageFile, error) {
	m, err := readMeta(r, size)
	if err != nil {
		return nil, err
	}
	pf := &pageFile{r: r, size: size, meta: m}
	ps := uint64(m.pageSize)
	if m.hwm < 3 || m.hwm > uint64(size)/ps+1 || m.hwm*ps > uint64(size) {
		return pf, fmt.Errorf("the file holds %d bytes but its meta page counts %d pages of %d bytes (%d bytes): cut short", size, m.hwm, ps, m.hwm*ps)
	}
	if m.root < 2 || m.root >= m.hwm {
		return pf, fmt.Errorf("its root page %d is outside the file's %d pages", m.root, m.hwm)
	}
	if m.freelist != noFreelist && (m.freelist < 2 || m.freelist >= m.hwm) {
		return pf, fmt.Errorf("its freelist page %d is outside the file's %d pages", m.freelist, m.hwm)
	}
	return pf, nil
}

// page reads page id with its overflow pages, checking its header.
func (pf *pageFile) page(id uint64) ([]byte, error) {
	ps := uint64(pf.meta.pageSize)
	if id < 2 || id >= pf.meta.hwm {
		return nil, fmt.Errorf("page %d is outside the file's %d pages", id, pf.meta.hwm)
	}
	var hdr [pageHeaderSize]byte
	if _, err := pf.r.ReadAt(hdr[:], int64(id*ps)); err != nil {
		return nil, fmt.Errorf("page %d: %w", id, err)
	}
	if got := native.Uint64(hdr[0:]); got != id {
		return nil, fmt.Errorf("page %d is not itself (its header says page %d, flags %#x): zeroed or overwritten", id, got, native.Uint16(hdr[8:]))
	}
	overflow := uint64(native.Uint32(hdr[12:]))
	if id+overflow >= pf.meta.hwm {
		return nil, fmt.Errorf("page %d runs %d pages past the file's %d", id, overflow, pf.meta.hwm)
	}
	buf := make([]byte, (1+overflow)*ps)
	if _, err := pf.r.ReadAt(buf, int64(id*ps)); err != nil {
		return nil, fmt.Errorf("page %d: %w", id, err)
	}
	return buf, nil
}

func flags(p []byte) uint16              { return native.Uint16(p[8:]) }
func elements(p []byte) int              { return int(native.Uint16(p[10:])) }
func overflowOf(p []byte) int            { return int(native.Uint32(p[12:])) }
func elemAt(i int) int                   { return pageHeaderSize + i*elementSize }
func pageLen(p []byte) string            { return fmt.Sprintf("%d bytes", len(p)) }
func inRange(p []byte, a, n uint64) bool { return a <= uint64(len(p)) && n <= uint64(len(p))-a }

// walker visits every bucket, key and value reachable from the root,
// noting problems and skipping what it cannot read: the rest is still
// visited.
type walker struct {
	pf      *pageFile
	reached map[uint64]string // page id → the bucket that uses it
	probs   problems
	// value, when set, receives each key and value (not bucket) with the
	// path of its bucket; they are valid during the call only.
	value func(bucket []string, k, v []byte)
	// bucket, when set, receives each bucket's path and sequence.
	bucket func(bucket []string, seq uint64)
	// page, when set, receives each page read with its bucket and flags.
	page func(bucket []string, id uint64, flags uint16)
	// shallow names the buckets whose leaves under a branch are counted as
	// used without being read (a bounded check); the freelist is then
	// checked for pages used and free at once only, not for lost pages.
	shallow map[string]bool
	// hurt holds the buckets (paths joined by "/"; "" is the root) in
	// which a page could not be read.
	hurt map[string]bool
}

// bad notes a problem in bucket path.
func (w *walker) bad(path []string, format string, a ...any) {
	if w.hurt == nil {
		w.hurt = map[string]bool{}
	}
	w.hurt[strings.Join(path, "/")] = true
	w.probs.add(format, a...)
}

func bucketName(path []string) string {
	if len(path) == 0 {
		return "the root"
	}
	return fmt.Sprintf("%q", bytes.Join(slicesOf(path), []byte("/")))
}

func slicesOf(ss []string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

// walk visits the whole file.
func (w *walker) walk() {
	w.reached = map[uint64]string{0: "meta", 1: "meta"}
	w.tree(nil, w.pf.meta.root, 0, nil, nil)
}

// tree walks the page id of bucket path, whose keys lie in [lo, hi) (nil:
// unbounded).
func (w *walker) tree(path []string, id uint64, depth int, lo, hi []byte) {
	name := bucketName(path)
	if depth > maxDepth {
		w.bad(path, "bucket %s: its tree is deeper than %d pages at page %d (a loop of pages)", name, maxDepth, id)
		return
	}
	if by, seen := w.reached[id]; seen {
		w.bad(path, "page %d of bucket %s is also used by %s", id, name, by)
		return
	}
	p, err := w.pf.page(id)
	if err != nil {
		w.bad(path, "bucket %s: %v", name, err)
		return
	}
	// Every read is bounds-checked; this is for a reader's own bug, which
	// must not lose the pages after this one.
	defer func() {
		if r := recover(); r != nil {
			w.bad(path, "page %d of bucket %s: %v", id, name, r)
		}
	}()
	if w.page != nil {
		w.page(path, id, flags(p))
	}
	for i := 0; i <= overflowOf(p); i++ {
		if by, seen := w.reached[id+uint64(i)]; seen && i > 0 {
			w.bad(path, "overflow page %d of bucket %s is also used by %s", id+uint64(i), name, by)
		}
		w.reached[id+uint64(i)] = name
	}
	switch flags(p) {
	case flagBranch:
		w.branch(path, id, p, depth, lo, hi)
	case flagLeaf:
		w.leaf(path, fmt.Sprintf("page %d", id), p, depth, lo, hi)
	default:
		w.bad(path, "page %d of bucket %s is neither a branch nor a leaf (flags %#x): zeroed or overwritten", id, name, flags(p))
	}
}

func (w *walker) branch(path []string, id uint64, p []byte, depth int, lo, hi []byte) {
	name := bucketName(path)
	n := elements(p)
	if n == 0 || !inRange(p, pageHeaderSize, uint64(n)*elementSize) {
		w.bad(path, "branch page %d of bucket %s: %d elements do not fit its %s", id, name, n, pageLen(p))
		return
	}
	keys := make([][]byte, 0, n)
	kids := make([]uint64, 0, n)
	for i := range n {
		e := elemAt(i)
		pos, ksize := uint64(native.Uint32(p[e:])), uint64(native.Uint32(p[e+4:]))
		if !inRange(p, uint64(e)+pos, ksize) {
			w.bad(path, "branch page %d of bucket %s: element %d points outside the page", id, name, i)
			return
		}
		k := p[uint64(e)+pos : uint64(e)+pos+ksize]
		if (i > 0 && bytes.Compare(k, keys[i-1]) <= 0) || (hi != nil && bytes.Compare(k, hi) >= 0) {
			w.bad(path, "branch page %d of bucket %s: its keys are out of order", id, name)
			return
		}
		keys = append(keys, k)
		kids = append(kids, native.Uint64(p[e+8:]))
	}
	if w.shallow[strings.Join(path, "/")] {
		if w.leavesUnread(path, id, kids) {
			return
		}
	}
	for i, kid := range kids {
		clo, chi := keys[i], hi
		if i == 0 {
			clo = lo // the first child also holds keys below the first branch key once they were deleted and re-added
		}
		if i+1 < len(keys) {
			chi = keys[i+1]
		}
		w.tree(path, kid, depth+1, clo, chi)
	}
}

// leavesUnread marks the children of branch page id as used without
// reading them, when they are leaves; it reports whether it did (their
// type is known from the first one: bbolt's trees are balanced).
func (w *walker) leavesUnread(path []string, id uint64, kids []uint64) bool {
	var hdr [pageHeaderSize]byte
	first := kids[0]
	if first < 2 || first >= w.pf.meta.hwm {
		return false
	}
	if _, err := w.pf.r.ReadAt(hdr[:], int64(first)*int64(w.pf.meta.pageSize)); err != nil || native.Uint16(hdr[8:]) != flagLeaf {
		return false
	}
	name := bucketName(path)
	for _, kid := range kids {
		if by, seen := w.reached[kid]; seen {
			w.bad(path, "page %d of bucket %s is also used by %s", kid, name, by)
			continue
		}
		if kid < 2 || kid >= w.pf.meta.hwm {
			w.bad(path, "branch page %d of bucket %s names page %d, outside the file's %d pages", id, name, kid, w.pf.meta.hwm)
			continue
		}
		w.reached[kid] = name
	}
	return true
}

// leaf reads a leaf page (where says which: a page id, or the inline page
// of a bucket) and walks the buckets it holds.
func (w *walker) leaf(path []string, where string, p []byte, depth int, lo, hi []byte) {
	name := bucketName(path)
	n := elements(p)
	if !inRange(p, pageHeaderSize, uint64(n)*elementSize) {
		w.bad(path, "leaf %s of bucket %s: %d elements do not fit its %s", where, name, n, pageLen(p))
		return
	}
	var prev []byte
	for i := range n {
		e := elemAt(i)
		fl := native.Uint32(p[e:])
		pos, ksize, vsize := uint64(native.Uint32(p[e+4:])), uint64(native.Uint32(p[e+8:])), uint64(native.Uint32(p[e+12:]))
		if fl&^bucketLeaf != 0 || !inRange(p, uint64(e)+pos, ksize) || !inRange(p, uint64(e)+pos+ksize, vsize) {
			w.bad(path, "leaf %s of bucket %s: element %d is garbled (flags %#x, or it points outside the page); the page's other %d elements are skipped", where, name, i, fl, n-i-1)
			return
		}
		k := p[uint64(e)+pos : uint64(e)+pos+ksize]
		v := p[uint64(e)+pos+ksize : uint64(e)+pos+ksize+vsize]
		if (prev != nil && bytes.Compare(k, prev) <= 0) || (lo != nil && bytes.Compare(k, lo) < 0) || (hi != nil && bytes.Compare(k, hi) >= 0) {
			w.bad(path, "leaf %s of bucket %s: its keys are out of order at element %d; the page's other %d elements are skipped", where, name, i, n-i-1)
			return
		}
		prev = k
		if fl&bucketLeaf == 0 {
			if w.value != nil {
				w.value(path, k, v)
			}
			continue
		}
		sub := append(slices.Clone(path), string(k))
		if len(v) < 16 {
			w.bad(sub, "bucket %s: its header in %s is %d bytes, not 16", bucketName(sub), where, len(v))
			continue
		}
		root, seq := native.Uint64(v[0:]), native.Uint64(v[8:])
		if w.bucket != nil {
			w.bucket(sub, seq)
		}
		if root != 0 {
			w.tree(sub, root, depth+1, nil, nil)
			continue
		}
		inline := v[16:]
		if len(inline) < pageHeaderSize || flags(inline) != flagLeaf {
			w.bad(sub, "bucket %s: its inline page in %s is not a leaf", bucketName(sub), where)
			continue
		}
		w.leaf(sub, "inline in "+where, inline, depth+1, nil, nil)
	}
}

// freelist checks the freelist page against the pages the walk reached:
// every page below the high-water mark is either used once or free.
func (w *walker) freelist() {
	free, ok := w.freePages()
	if !ok || len(w.shallow) > 0 {
		return // unreadable, or the leaves' overflow pages were not read
	}
	m := w.pf.meta
	lost, first := 0, uint64(0)
	for id := uint64(2); id < m.hwm; id++ {
		if _, used := w.reached[id]; !used && !free[id] {
			if lost == 0 {
				first = id
			}
			lost++
		}
	}
	if lost > 0 {
		w.probs.add("%d pages are neither used nor free (the first: page %d)", lost, first)
	}
}

// freePages reads the freelist page into the set of free page ids, noting
// its problems; false when it cannot be read whole.
func (w *walker) freePages() (map[uint64]bool, bool) {
	m := w.pf.meta
	free := map[uint64]bool{}
	if m.freelist == noFreelist {
		return free, true
	}
	p, err := w.pf.page(m.freelist)
	switch {
	case err != nil:
		w.probs.add("the freelist: %v", err)
		return nil, false
	case flags(p) != flagFreelist:
		w.probs.add("the freelist page %d is not a freelist (flags %#x): zeroed or overwritten", m.freelist, flags(p))
		return nil, false
	}
	for i := 0; i <= overflowOf(p); i++ {
		if by, seen := w.reached[m.freelist+uint64(i)]; seen {
			w.probs.add("freelist page %d is also used by bucket %s", m.freelist+uint64(i), by)
		}
		w.reached[m.freelist+uint64(i)] = "freelist"
	}
	idx, n := uint64(0), uint64(elements(p))
	if n == 0xFFFF {
		if !inRange(p, pageHeaderSize, 8) {
			w.probs.add("the freelist page %d is garbled", m.freelist)
			return nil, false
		}
		idx, n = 1, native.Uint64(p[pageHeaderSize:])
	}
	if n > uint64(len(p))/8 || !inRange(p, pageHeaderSize+idx*8, n*8) {
		w.probs.add("the freelist page %d counts %d free pages, more than it holds", m.freelist, n)
		return nil, false
	}
	for i := range n {
		id := native.Uint64(p[pageHeaderSize+(idx+i)*8:])
		switch {
		case id < 2 || id >= m.hwm:
			w.probs.add("the freelist names page %d, outside the file's %d pages", id, m.hwm)
			return nil, false
		case free[id]:
			w.probs.add("the freelist names page %d twice", id)
		}
		free[id] = true
		if by, used := w.reached[id]; used {
			w.probs.add("page %d is free and used by %s at once", id, by)
		}
	}
	return free, true
}
