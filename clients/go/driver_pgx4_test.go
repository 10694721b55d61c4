//go:build dlock_pgx4

// driver_pgx4_test.go: the tests on pgx v4's stdlib (go test -tags dlock_pgx4).
// Promises: none

package dlock_test

import _ "github.com/jackc/pgx/v4/stdlib"

// oneTrip: what the DSN needs for each statement to go in one round trip.
const oneTrip = "prefer_simple_protocol=true"
