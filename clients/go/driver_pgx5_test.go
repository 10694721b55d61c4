//go:build dlock_pgx5

// driver_pgx5_test.go: the tests on pgx v5's stdlib (go test -tags dlock_pgx5).
// Promises: none

package dlock_test

import _ "github.com/jackc/pgx/v5/stdlib"

// oneTrip: what the DSN needs for each statement to go in one round trip.
const oneTrip = "default_query_exec_mode=simple_protocol"
