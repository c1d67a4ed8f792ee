package memstore

import "unsafe"

// Arena sizes: records' bytes are appended to pageSize pages; a record
// over bigData bytes gets a page of its own.
const (
	pageSize = 64 << 10
	bigData  = pageSize / 4
	// noPage is the page of a record without bytes.
	noPage = ^uint32(0)
)

// arena holds one shard's record bytes in pages that carry no pointers.
// Its methods are called with the shard's lock held.
//
// Bytes once written are never written again: a page is filled in order
// and, when freed, left to the garbage collector rather than reused. So a
// slice of a record's bytes stays valid, unchanged, after the lock is
// released, even after the record is dropped or moved by compaction (the
// slice keeps its page alive): replays decode straight from the arena.
type arena struct {
	pages [][]byte
	live  []int    // bytes of live records per page
	holes []uint32 // page numbers whose page was freed
	cur   uint32   // the page being filled, or noPage
	used  int      // bytes of cur handed out

	pageBytes int // sum of the pages' sizes
	liveBytes int // sum of live
}

// alloc returns n bytes at (page, off); buf is those bytes, to be filled
// at once. n == 0 takes no room (page noPage).
func (a *arena) alloc(n uint32) (page, off uint32, buf []byte) {
	if n == 0 {
		return noPage, 0, nil
	}
	if n > bigData {
		page = a.newPage(make([]byte, n))
		a.live[page] = int(n)
		a.liveBytes += int(n)
		return page, 0, a.pages[page]
	}
	if a.cur == noPage || a.used+int(n) > pageSize {
		old := a.cur
		a.cur, a.used = a.newPage(make([]byte, pageSize)), 0
		if old != noPage && a.live[old] == 0 {
			a.freePage(old)
		}
	}
	off = uint32(a.used)
	a.used += int(n)
	a.live[a.cur] += int(n)
	a.liveBytes += int(n)
	return a.cur, off, a.pages[a.cur][off : off+n : off+n]
}

func (a *arena) newPage(p []byte) uint32 {
	a.pageBytes += len(p)
	if k := len(a.holes); k > 0 {
		i := a.holes[k-1]
		a.holes = a.holes[:k-1]
		a.pages[i], a.live[i] = p, 0
		return i
	}
	a.pages = append(a.pages, p)
	a.live = append(a.live, 0)
	return uint32(len(a.pages) - 1)
}

// bytes returns the n bytes at (page, off).
func (a *arena) bytes(page, off, n uint32) []byte {
	if n == 0 {
		return nil
	}
	return a.pages[page][off : off+n : off+n]
}

// release gives back n bytes of page; a page left without live bytes is
// freed unless it is being filled.
func (a *arena) release(page, n uint32) {
	if n == 0 {
		return
	}
	a.live[page] -= int(n)
	a.liveBytes -= int(n)
	if a.live[page] == 0 && page != a.cur {
		a.freePage(page)
	}
}

func (a *arena) freePage(i uint32) {
	a.pageBytes -= len(a.pages[i])
	a.pages[i] = nil
	a.holes = append(a.holes, i)
}

// trim frees the page being filled if it holds no live bytes, so that an
// idle shard holds no pages.
func (a *arena) trim() {
	if a.cur != noPage && a.live[a.cur] == 0 {
		a.freePage(a.cur)
		a.cur = noPage
	}
}

// victims returns the pages to compact (indexed by page number), nil when
// the pages hold at most twice the live bytes (plus two pages of slack):
// the shared pages, other than cur, that are less than half full.
func (a *arena) victims() []bool {
	if a.pageBytes <= 2*a.liveBytes+2*pageSize {
		return nil
	}
	v := make([]bool, len(a.pages))
	any := false
	for i, p := range a.pages {
		if len(p) == pageSize && uint32(i) != a.cur && a.live[i] < pageSize/2 {
			v[i], any = true, true
		}
	}
	if !any {
		return nil
	}
	return v
}

// unsafeString views b as a string without copying; the caller must not
// keep it past b's next change.
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
