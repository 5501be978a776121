package cli

import (
	"context"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/ops"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/queue/dashboard"
)

// uiDashboard connects and returns the dashboard of `skiplock ui`, what it
// shows ("schema NAME", or "shards 1 and 2") and how to close it: with one
// --database-url per shard, the dashboard over every shard
// (dashboard.NewSharded), each shard's own under /shards/N/.
func (a *app) uiDashboard(ctx context.Context, opts dashboard.Options) (http.Handler, string, func(), error) {
	if !a.sharded() {
		client, done, err := a.open(ctx)
		if err != nil {
			return nil, "", nil, err
		}
		info, err := ops.Schema(ctx, client)
		if err == nil {
			var dash http.Handler
			if dash, err = dashboard.New(client, opts); err == nil {
				return dash, "schema " + info.Name, done, nil
			}
		}
		done()
		return nil, "", nil, err
	}
	set, err := a.connectShards(ctx)
	if err != nil {
		return nil, "", nil, err
	}
	pools := map[int]*pgxpool.Pool{}
	for _, c := range set {
		pools[c.n] = c.pool
	}
	sc, err := queue.NewSharded(pools)
	if err == nil {
		var dash http.Handler
		if dash, err = dashboard.NewSharded(sc, opts); err == nil {
			return dash, "shards " + joinInts(set.numbers()), set.close, nil
		}
	}
	set.close()
	return nil, "", nil, err
}
