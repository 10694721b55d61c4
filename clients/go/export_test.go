// export_test.go: names the tests (package dlock_test) read from the package.
// Promises: none
package dlock

// AcquireTries: how many times an acquisition rolled back by the server is
// sent in all (acquireTries).
const AcquireTries = acquireTries
