// Package dashboard is skiplock's web dashboard as an http.Handler, to
// mount in your own application behind your own login, or to run on its
// own with `skiplock ui`: queues with their backlog, throughput and failure
// rate over the last hour (read from the table), tasks paged by ID and
// filtered by state, queue and name, a task's history, failed tasks to
// requeue or cancel, tasks to enqueue, run now or delete, workflows,
// sequences, periodic schedules, limits, who holds which task lock, and the
// audit trail of operator changes. Pages are rendered on the server with
// html/template from assets embedded in the binary; a small script
// refreshes them and asks for confirmations. It needs nothing but the
// standard library and skiplock.
//
// # Mounting
//
// The handler serves paths relative to its mount point: mount it with
// http.StripPrefix, and tell it the prefix in Options.Prefix so that its
// links, forms, assets, redirects and cookies stay under it:
//
//	dash, err := dashboard.New(client, dashboard.Options{
//		Prefix: "/admin/jobs",
//		Authorize: func(r *http.Request, a dashboard.Action) (string, error) {
//			u := currentUser(r.Context()) // set by your login middleware
//			if !u.Admin && a.Kind != queue.AuditRequeue {
//				return "", fmt.Errorf("%s may only requeue tasks", u.Email)
//			}
//			return u.Email, nil // recorded in the audit trail
//		},
//	})
//	if err != nil { ... }
//	mux.Handle("/admin/jobs/", requireLogin(http.StripPrefix("/admin/jobs", dash)))
//
// At the root, leave Prefix empty and mount it on "/".
//
// # Several shards
//
// NewSharded serves one dashboard over every shard of a
// queue.ShardedClient, with the same Options. Its Queues page lists each
// shard's queues, a row per shard and queue, with their totals; Tasks and
// Failed list the tasks of every shard, newest first, each naming its
// shard; their bulk requeue and cancel run on every shard (every matching
// task) or on the shards of the tasks picked, one audit record per shard.
// An ID at the top, /tasks/{id}, /workflows/{id} or /batches/{id}, leads to
// its shard's page (queue.ShardOf); each shard's own dashboard is under
// /shards/{n}/. A shard that cannot be read shows as an error row while the
// others show:
//
//	dash, err := dashboard.NewSharded(sc, dashboard.Options{Prefix: "/admin/jobs"})
//	if err != nil { ... }
//	mux.Handle("/admin/jobs/", requireLogin(http.StripPrefix("/admin/jobs", dash)))
//
// # Security
//
// The dashboard authenticates nobody: whoever reaches the handler can read
// every page, so put it behind your application's authentication.
// Options.ReadOnly hides every action and refuses every POST with 403;
// Options.Authorize decides each action and names who asked, for the audit
// trail (queue.AuditLog; the Audit page). Every change is a POST that must
// carry the CSRF token twice, in a form field and in a SameSite=Strict
// cookie, and come from the same origin (Origin, Sec-Fetch-Site); anything
// else gets 403. Payloads, errors and names are escaped by html/template,
// and a database password in an error is masked. Every response forbids
// framing and inline script (Content-Security-Policy, X-Frame-Options), and
// pages are not cached.
package dashboard
