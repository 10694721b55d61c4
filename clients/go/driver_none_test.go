//go:build !dlock_pq && !dlock_pgx4 && !dlock_pgx5

// driver_none_test.go: no driver compiled in: every test skips (open).
// Promises: none

package dlock_test

const oneTrip = ""
