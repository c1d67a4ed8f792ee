// Package deploytest proves idemgate's packaging offline: the Helm chart in
// charts/idemgate, the plain manifests in examples/kubernetes and the
// Dockerfile. It is its own Go module so that Helm, k8s.io/api and BuildKit
// never enter the main module's go.mod; `make test-deploy` runs it (without
// -race: the packages under test are templates and text, not concurrent Go).
//
// Nothing here needs a cluster, a Docker engine or the network:
//   - the chart is rendered and linted with Helm's Go packages for every
//     scenario in charts/idemgate/ci and Kubernetes 1.28, 1.29 and 1.33;
//   - every rendered object is decoded strictly (sigs.k8s.io/json, which is
//     case-sensitive and refuses unknown fields) into its k8s.io/api type;
//   - the invariants of the chart are checked on the typed objects, and the
//     rendered config is checked by `idemgate validate`, built from this
//     repository;
//   - the Dockerfile is parsed and linted by BuildKit, as `docker build
//     --check` would.
package deploytest
