// Package docs holds the documentation's tests; it has no code of its own.
//
// The tests read README.md and docs/*.md from the repository:
//
//   - every command block marked runnable is run against the built idemgate
//     binary (IDEMGATE_BIN, else built once), and the output lines it shows
//     (lines starting "#>") must appear in the command's output;
//   - every relative link and #anchor resolves;
//   - every picture docs/NAME.svg is the rendering of docs/NAME.dot: `make
//     docs` stamps the source's SHA-256 into the SVG, so the check needs no
//     Graphviz.
//
// A block is runnable when the line before its opening fence is
// "<!-- runnable -->" (run from the repository's root, `bin/idemgate` being
// the binary under test) or "<!-- runnable: demo -->" (run while `idemgate
// demo` serves; its curl lines must be the ones the demo prints, with
// 127.0.0.1:8080 standing for the demo's address) or "<!-- runnable: serve
// -->" (its `bin/idemgate --config FILE` line is started in front of a
// loopback API that counts its writes, with upstream.url, listen and
// admin_listen set through the environment; 127.0.0.1:8080 stands for its
// address, and the API must have run each keyed write exactly once).
package docs
