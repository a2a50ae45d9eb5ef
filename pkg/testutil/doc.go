// Package testutil holds helpers for dlb's tests: privilege gates, network
// namespaces, and packet builders. Only _test.go files import it.
package testutil
