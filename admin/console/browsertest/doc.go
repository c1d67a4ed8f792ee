// Package browsertest proves the operator console (admin/console) in a real
// browser: headless Chromium (Debian's package, fetched by
// scripts/chromium.sh) driven through the DevTools protocol with chromedp.
// It is its own Go module, so that chromedp stays out of idemgate's go.mod;
// `make test` runs it without -race (it drives a browser, not concurrent
// code of its own).
package browsertest
