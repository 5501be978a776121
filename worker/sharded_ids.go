package worker

import "github.com/skiplock/skiplock/internal/shard"

// sweepStart is where a rescuer's sweep of task ids up to high begins: the
// start of high's shard's range (migrations.SetShard refuses a database
// with ids below it), 0 on a database that is not stamped. A sweep from 0
// on shard n would size its spans by n<<48 ids that do not exist.
func sweepStart(high int64) int64 { return shard.Base(shard.Of(high)) }
