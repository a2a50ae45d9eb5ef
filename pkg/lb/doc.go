// Package lb names the domain of dlb: clusters (virtual addresses), the
// ports balanced on them, the servers behind each port, and the executor
// settings that apply to all of them.
//
// The types follow IBM Network Dispatcher's object model: an operator
// addresses objects as cluster@port@server, where an empty component is a
// wildcard and '+' joins several values (see ParseTarget).
//
// Everything here is pure: values, parsing and validation, with no I/O.
// Validation errors are *FieldError values that name the offending field, so
// that the daemon can refuse bad input with a message an operator can act on.
package lb
