package dashboardtest

import (
	"context"
	"testing"
	"time"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/worker"
)

// seed fills the schema with what a dashboard usually shows: an hour of
// finished tasks at rates that vary, failures with their history, a
// backlog that grows while the dashboard samples it, a paused queue, and a
// real worker holding two running tasks. It returns a failed task with
// three attempts.
func (b *bundle) seed(t *testing.T) int64 {
	t.Helper()
	ctx := context.Background()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := b.pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("seeding: %v\n%s", err, sql)
		}
	}
	// An hour of completed tasks, per queue at a rate that rises and falls.
	exec(`
		INSERT INTO skiplock_tasks (queue, name, status, payload, attempt, worker_id, created_at, started_at, finished_at)
		SELECT q.queue, q.name, 'completed', jsonb_build_object('seq', s), 1, q.worker,
		       now() - s * interval '1 second' - q.took - interval '2 seconds',
		       now() - s * interval '1 second' - q.took,
		       now() - s * interval '1 second'
		FROM (VALUES ('mail', 'email.send', 0.6, interval '180 milliseconds', 0.0, 'app-7f9c4-1-k2x9'),
		             ('default', 'thumbnail.render', 0.25, interval '900 milliseconds', 1.0, 'app-7f9c4-1-k2x9'),
		             ('reports', 'report.build', 0.05, interval '4 seconds', 2.0, 'reports-0-17-p0q3'),
		             ('webhooks', 'webhook.deliver', 0.4, interval '120 milliseconds', 3.0, 'app-7f9c4-2-m8d1'))
		     AS q(queue, name, rate, took, phase, worker)
		CROSS JOIN generate_series(1, 3599) AS s
		WHERE random() < q.rate * (0.55 + 0.45 * sin(s / 500.0 + q.phase))`)

	// Webhook deliveries that failed for good, more of them during an
	// outage half an hour ago; a few mails too.
	exec(`
		INSERT INTO skiplock_tasks (queue, name, status, payload, attempt, max_attempts, worker_id, errors, created_at, started_at, finished_at)
		SELECT q.queue, q.name, 'failed', q.payload, 3, 3, NULL,
		       jsonb_build_array(
		         jsonb_build_object('attempt', 1, 'outcome', 'error', 'error', q.err, 'worker_id', 'app-7f9c4-2-m8d1', 'host', 'app-7f9c4', 'pid', 41,
		                            'started_at', now() - s * interval '1 second' - interval '9 seconds', 'finished_at', now() - s * interval '1 second' - interval '8 seconds'),
		         jsonb_build_object('attempt', 2, 'outcome', 'error', 'error', q.err, 'worker_id', 'app-7f9c4-1-k2x9', 'host', 'app-7f9c4', 'pid', 40,
		                            'started_at', now() - s * interval '1 second' - interval '6 seconds', 'finished_at', now() - s * interval '1 second' - interval '5 seconds'),
		         jsonb_build_object('attempt', 3, 'outcome', 'error', 'error', q.err, 'worker_id', 'app-7f9c4-2-m8d1', 'host', 'app-7f9c4', 'pid', 41,
		                            'started_at', now() - s * interval '1 second' - interval '1 second', 'finished_at', now() - s * interval '1 second'))
		       , now() - s * interval '1 second' - interval '10 seconds', NULL, now() - s * interval '1 second'
		FROM (VALUES ('webhooks', 'webhook.deliver', '{"url": "https://hooks.partner.example/events", "event": "invoice.paid"}'::jsonb,
		              'POST https://hooks.partner.example/events: 503 Service Unavailable', 0.02),
		             ('mail', 'email.send', '{"to": "ops@example.com", "template": "weekly-digest"}'::jsonb,
		              'smtp: 421 4.7.0 mx.example.com: too many connections, try again later', 0.004))
		     AS q(queue, name, payload, err, rate)
		CROSS JOIN generate_series(1, 3599) AS s
		WHERE random() < q.rate * (1 + 3 * exp(-power((s - 1800) / 240.0, 2)))`)

	// The task whose page the docs show: three attempts, two outcomes.
	var failedID int64
	err := b.pool.QueryRow(ctx, `
		INSERT INTO skiplock_tasks (queue, name, status, payload, metadata, attempt, max_attempts, errors, created_at, finished_at)
		VALUES ('webhooks', 'webhook.deliver', 'failed',
		        '{"url": "https://hooks.partner.example/events", "event": "invoice.paid", "invoice_id": "inv_8842", "amount_cents": 12900, "currency": "EUR"}',
		        '{"trace": {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}',
		        3, 3,
		        jsonb_build_array(
		          jsonb_build_object('attempt', 1, 'outcome', 'error', 'error', 'POST https://hooks.partner.example/events: 503 Service Unavailable',
		                             'worker_id', 'app-7f9c4-2-m8d1', 'host', 'app-7f9c4', 'pid', 41, 'started_at', now() - interval '4 minutes', 'finished_at', now() - interval '4 minutes' + interval '310 milliseconds'),
		          jsonb_build_object('attempt', 2, 'outcome', 'timeout', 'error', 'timed out after 30s: Post "https://hooks.partner.example/events": context deadline exceeded',
		                             'worker_id', 'app-7f9c4-1-k2x9', 'host', 'app-7f9c4', 'pid', 40, 'started_at', now() - interval '3 minutes', 'finished_at', now() - interval '2 minutes 30 seconds'),
		          jsonb_build_object('attempt', 3, 'outcome', 'error', 'error', 'POST https://hooks.partner.example/events: 503 Service Unavailable',
		                             'worker_id', 'app-7f9c4-2-m8d1', 'host', 'app-7f9c4', 'pid', 41, 'started_at', now() - interval '40 seconds', 'finished_at', now() - interval '40 seconds' + interval '280 milliseconds')),
		        now() - interval '4 minutes 2 seconds', now() - interval '40 seconds')
		RETURNING id`).Scan(&failedID)
	if err != nil {
		t.Fatal(err)
	}

	// A paused queue whose backlog waits.
	if err := b.client.PauseQueue(ctx, "webhooks"); err != nil {
		t.Fatal(err)
	}
	// A backlog: due tasks that have waited a while.
	exec(`
		INSERT INTO skiplock_tasks (queue, name, payload, run_at, created_at)
		SELECT q.queue, q.name, jsonb_build_object('seq', i), now() - q.age * (1 - i / (q.n + 1.0)), now() - q.age
		FROM (VALUES ('reports', 'report.build', interval '6 minutes', 40),
		             ('default', 'thumbnail.render', interval '40 seconds', 12),
		             ('webhooks', 'webhook.deliver', interval '12 minutes', 90))
		     AS q(queue, name, age, n)
		CROSS JOIN LATERAL generate_series(1, q.n) AS i`)
	// Tasks waiting out a retry's backoff, and a permanent failure.
	exec(`
		INSERT INTO skiplock_tasks (queue, name, payload, attempt, max_attempts, run_at, errors, created_at)
		SELECT 'mail', 'email.send', jsonb_build_object('to', 'user' || i || '@example.com'), i % 3 + 1, 25,
		       now() + (i * 17) * interval '1 second',
		       jsonb_build_array(jsonb_build_object('attempt', i % 3 + 1, 'outcome', 'error',
		         'error', 'smtp: 421 4.7.0 mx.example.com: too many connections, try again later',
		         'worker_id', 'app-7f9c4-1-k2x9', 'host', 'app-7f9c4', 'pid', 40,
		         'started_at', now() - interval '20 seconds', 'finished_at', now() - interval '19 seconds')),
		       now() - interval '2 minutes'
		FROM generate_series(1, 6) AS i`)
	exec(`
		INSERT INTO skiplock_tasks (queue, name, status, payload, attempt, max_attempts, errors, created_at, finished_at)
		VALUES ('default', 'thumbnail.render', 'failed', '{"image": "uploads/7f/IMG_0042.HEIC"}', 1, 25,
		        jsonb_build_array(jsonb_build_object('attempt', 1, 'outcome', 'error', 'permanent', true,
		          'error', 'image: unknown format (HEIC): not retried',
		          'worker_id', 'app-7f9c4-1-k2x9', 'host', 'app-7f9c4', 'pid', 40,
		          'started_at', now() - interval '3 minutes', 'finished_at', now() - interval '3 minutes')),
		        now() - interval '3 minutes 1 second', now() - interval '3 minutes')`)
	// Periodic schedules and shared rate limits, as workers leave them.
	exec(`
		INSERT INTO skiplock_periodic (schedule, last_tick, updated_at)
		VALUES ('nightly-report', date_trunc('day', now()), date_trunc('day', now()) + interval '2 seconds'),
		       ('hourly-digest', date_trunc('hour', now()), date_trunc('hour', now()) + interval '1 second'),
		       ('cleanup-every-5m', date_trunc('minute', now()) - interval '1 minute', now() - interval '58 seconds')`)
	exec(`
		INSERT INTO skiplock_rate_limits (key, window_start, used, last_granted)
		VALUES ('queue:webhooks', date_trunc('minute', now()), 42, 3),
		       ('name:email.send', date_trunc('second', now()), 9, 1)`)
	// Workers that stopped: one a minute ago, one hours ago.
	exec(`
		INSERT INTO skiplock_workers (id, host, pid, queues, lock_backend_pid, started_at, heartbeat_at)
		VALUES ('app-7f9c4-3-x0a2', 'app-7f9c4', 43, '{mail,default}', NULL, now() - interval '2 hours', now() - interval '70 seconds'),
		       ('app-51e0d-1-aa01', 'app-51e0d', 12, '{default}', NULL, now() - interval '9 hours', now() - interval '5 hours')`)
	exec(`INSERT INTO skiplock_tasks (queue, name, payload, run_at)
		SELECT 'reports', 'report.build', jsonb_build_object('month', i), now() + i * interval '1 hour'
		FROM generate_series(1, 25) AS i`)

	// A worker that holds two running reports.
	b.runWorker(t, worker.Config{Queues: []string{"reports"}, Concurrency: 2, WorkerID: "reports-0-17-p0q3"}, worker.Handlers{
		"report.build": func(ctx context.Context, _ *worker.Task) error {
			<-ctx.Done()
			return ctx.Err()
		},
	})
	pgtest.Eventually(t, 5*time.Second, "2 reports running", func() bool {
		var running int
		if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM skiplock_tasks WHERE status = 'running'`).Scan(&running); err != nil {
			t.Fatal(err)
		}
		return running == 2
	})
	return failedID
}
