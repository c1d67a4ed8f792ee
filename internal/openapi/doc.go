// Package openapi derives idemgate routes from an API's own description: an
// OpenAPI 3.0/3.1 or Swagger 2.0 document, in YAML or JSON, with its $refs
// resolved (github.com/getkin/kin-openapi; Swagger 2.0 through its
// openapi2conv).
//
// It backs three commands, each with a Run-style entry point taking the
// command's arguments and its outputs:
//
//   - [RunImport]: `idemgate routes import SPEC [--base-path P] [--out FILE]`
//     prints a `routes:` section, one route per write operation (POST, PUT,
//     PATCH, DELETE), named by operationId, with the server URL's base path
//     applied and the x-idempotency and x-ratelimit extensions read;
//   - the same with `--merge CONFIG [--dry-run]`: updates an existing
//     config's routes in place (see [Merge] for what it keeps);
//   - [RunAgainst]: `idemgate validate --against SPEC --config CONFIG`
//     reports write operations no route protects and routes that match no
//     operation.
//
// Whatever the importer cannot express exactly (a parameter in the middle of
// a segment, two operations that would be ambiguous routes, an extension
// value it does not understand) is reported on stderr, one line per problem
// starting with the JSON pointer of the operation; nothing is dropped
// silently.
package openapi
