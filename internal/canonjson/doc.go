// Package canonjson canonicalizes JSON request bodies for idemgate's request
// fingerprint (DESIGN.md, "Fingerprint"), so that two retries of one request
// that differ only in formatting hash alike while any semantic difference does
// not.
//
// The canonical form of a document is:
//
//   - no insignificant whitespace;
//   - object members sorted by the bytes of their decoded UTF-8 names (not by
//     UTF-16 code units as RFC 8785 does: U+FF61 sorts before U+1F600);
//   - array elements in their original order;
//   - number literals exactly as written (1, 1.0 and 1e0 stay different);
//   - every string decoded and re-encoded minimally: `\"` and `\\`, the short
//     escapes \b \f \n \r \t for those control characters, \u00xx (lower-case
//     hex) for the other characters below U+0020, and raw UTF-8 for everything
//     else, including `/`, non-ASCII characters and U+2028/U+2029. So "\u00e9"
//     and "é" are the same string, and surrogate pairs are decoded;
//   - the members or array elements named by a list of RFC 6901 JSON pointers
//     removed ([Pointer]).
//
// A document is not canonicalizable, and [Append] reports false, when it is
// not exactly one JSON value as RFC 8259 defines it (empty input, trailing
// data, a byte order mark, leading zeros, NaN, ...), when a string holds
// invalid UTF-8 or a lone surrogate escape, when any object has two members
// whose decoded names are equal (even inside a member that a pointer removes),
// when arrays and objects nest deeper than [MaxDepth], or when reordering
// members would copy more than 32 times the canonical form (plus a MiB):
// only objects nested dozens of levels deep inside unsorted objects do. The
// caller then fingerprints the raw bytes.
//
// The canonicalizer is a hand-written single streaming pass that writes the
// canonical form as it parses, with explicit stacks instead of recursion,
// and reorders an object's members in place when the object closes. Arrays
// and scalars need no working memory at all, so hostile input costs memory
// bounded by [WorkingMemory] (a "[0,0,...]" body: nothing beyond dst; issue
// 15), time O(n log n) in the worst case (with the reordering bound above),
// and never deep Go stacks. Working buffers are pooled: in steady state
// Append allocates nothing beyond the growth of dst.
package canonjson
