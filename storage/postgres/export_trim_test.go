package postgres

import "time"

// SetFinishGrace makes d's later finishes keep their deltas' events rows
// for grace instead of finishGrace.
func SetFinishGrace(d *Store, grace time.Duration) { d.finishGrace = grace }

// FinishGrace is how long a finish keeps its deltas' events rows.
const FinishGrace = finishGrace

const (
	// TrimSQL is the trimmer's statement, for plan tests.
	TrimSQL = trimSQL
	// DBNowNS is PostgreSQL's clock in Unix nanoseconds, as SQL.
	DBNowNS = dbNowNS
)
