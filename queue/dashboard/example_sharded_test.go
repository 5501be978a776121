package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/migrations"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/queue/dashboard"
)

// The dashboard over two shards, mounted under /admin/jobs: a task's ID
// leads to its shard's pages.
func ExampleNewSharded() {
	ctx := context.Background()
	pools := map[int]*pgxpool.Pool{}
	for _, n := range []int{1, 2} {
		pool, cleanup := pgtest.ExamplePool()
		defer cleanup()
		if err := migrations.SetShard(ctx, pool, n); err != nil {
			fmt.Println(err)
			return
		}
		pools[n] = pool
	}
	sc, err := queue.NewSharded(pools)
	if err != nil {
		fmt.Println(err)
		return
	}
	dash, err := dashboard.NewSharded(sc, dashboard.Options{Prefix: "/admin/jobs"})
	if err != nil {
		fmt.Println(err)
		return
	}
	mux := http.NewServeMux()
	mux.Handle("/admin/jobs/", requireLogin(http.StripPrefix("/admin/jobs", dash)))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	res, err := sc.Enqueue(ctx, "email.send", nil, queue.WithShardKey("customer-42"))
	if err != nil {
		fmt.Println(err)
		return
	}
	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/admin/jobs/tasks/%d", srv.URL, res.ID), nil)
	req.Header.Set("X-User", "alice")
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.Status, resp.Header.Get("Location") == fmt.Sprintf("/admin/jobs/shards/%d/tasks/%d", queue.ShardOf(res.ID), res.ID))
	// Output:
	// 302 Found true
}
