// Package jsonlog is a [log/slog.Handler] that writes the bytes of
// [slog.NewJSONHandler], with every record's time in UTC, at a fraction of
// its CPU.
//
// It exists because of what perf measured on idemgate under load (issue 31):
// writing the access-log line through slog's JSON handler cost about 3.5 µs
// of a pass-through request's 9–10 µs in idemgate's own code, most of it in
// slog's generic attribute path (1.6 µs for the line's 11 attributes) and in
// encoding/json, through which slog encodes every float64 (the line's
// duration_ms). This handler encodes the common kinds itself (String, Int64,
// Uint64, Float64, Bool, Duration, Time, Group, and the error and nil values
// of KindAny) into one pooled buffer and writes it with one Write.
//
// What it does not encode itself it leaves to slog: a record holding a
// LogValuer, any other KindAny value (structs, maps, slices, a json.Marshaler,
// a *slog.Source), a time whose year is outside [0, 9999], or an error whose
// Error method panics, is written by a real [slog.JSONHandler] derived
// through the same WithAttrs and WithGroup chain; so is every record when
// the options set ReplaceAttr or AddSource. Either way the line is slog's.
//
// Byte-identity is the contract, including slog's quirks (the comma it
// omits after a group whose attributes are all empty, "!ERROR:" for NaN and
// ±Inf, \ufffd for invalid UTF-8, \u2028 and \u2029 escaped, <, > and &
// not): FuzzHandler and the table tests in handler_test.go build records of
// every kind, with arbitrary bytes in messages, keys and values, nested
// groups and WithAttrs/WithGroup chains, and compare this handler's bytes
// with those of slog.NewJSONHandler behind a handler that sets the record's
// time to UTC. A new Go release that changes slog's output fails them.
package jsonlog
