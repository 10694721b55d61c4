//go:build dlock_pq

// driver_pq_test.go: the tests on lib/pq (go test -tags dlock_pq).
// Promises: none

package dlock_test

import _ "github.com/lib/pq"

// oneTrip: what the DSN needs for each statement to go in one round trip.
const oneTrip = "binary_parameters=yes"
