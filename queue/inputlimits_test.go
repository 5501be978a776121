package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/skiplock/skiplock/internal/pgerr"
	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
)

// jsonString is a JSON string value of exactly n bytes, quotes included.
func jsonString(n int) json.RawMessage {
	return json.RawMessage(`"` + strings.Repeat("p", n-2) + `"`)
}

// metadataHook sets one metadata entry of n bytes on every task.
type metadataHook struct{ n int }

func (h metadataHook) BeforeEnqueue(_ context.Context, tasks []*queue.EnqueuedTask) {
	for _, t := range tasks {
		t.Metadata["big"] = jsonString(h.n)
	}
}

func (metadataHook) AfterEnqueue(context.Context, []*queue.EnqueuedTask) {}

// TestInputLimits: every path of the Go client refuses a payload, metadata,
// name or key over its limit, with an error wrapping ErrInvalidTask that
// names the size, the limit and the option, and inserts nothing; a task at
// the limit is enqueued; the options change the limits.
func TestInputLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)

	check := func(what string, err error, want string) {
		t.Helper()
		if !errors.Is(err, queue.ErrInvalidTask) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want ErrInvalidTask containing %q", what, err, want)
		}
	}
	c := queue.New(pool)
	overPayload := jsonString(queue.DefaultMaxPayloadSize + 1)
	const payloadErr = `task "big": payload is 1,048,577 bytes, over the 1,048,576-byte limit (queue.WithMaxPayloadSize)`
	_, err := c.Enqueue(ctx, "big", overPayload)
	check("Enqueue", err, "skiplock: invalid task: "+payloadErr)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.EnqueueTx(ctx, tx, "big", overPayload)
	check("EnqueueTx", err, payloadErr)
	_ = tx.Rollback(ctx)
	_, err = c.EnqueueMany(ctx, []queue.NewTask{{Name: "ok"}, {Name: "big", Payload: overPayload}})
	check("EnqueueMany", err, payloadErr)
	_, err = c.Enqueue(ctx, "big", overPayload, queue.WithSequence("k")) // not group-committed
	check("Enqueue with a sequence", err, payloadErr)
	_, err = c.EnqueueWorkflow(ctx, queue.Workflow{Name: "wf", Steps: []queue.Step{{Name: "a"}, {Name: "big", Payload: overPayload}}})
	check("EnqueueWorkflow", err, payloadErr)

	overMetadata := json.RawMessage(`{"k":` + string(jsonString(queue.DefaultMaxMetadataSize-5)) + `}`)
	_, err = c.Enqueue(ctx, "meta", nil, queue.WithMetadata(overMetadata))
	check("WithMetadata", err, `task "meta": metadata is 65,537 bytes, over the 65,536-byte limit (queue.WithMaxMetadataSize)`)
	// What a hook adds counts: the size is the metadata as stored.
	hooked := queue.New(pool, queue.WithEnqueueHooks(metadataHook{n: queue.DefaultMaxMetadataSize}))
	_, err = hooked.Enqueue(ctx, "hooked", nil)
	check("metadata from a hook", err, "metadata is 65,544 bytes, over the 65,536-byte limit")

	long := strings.Repeat("n", queue.MaxNameLength+1)
	key := strings.Repeat("k", queue.MaxKeyLength+1)
	for _, tc := range []struct {
		what string
		task queue.NewTask
		want string
	}{
		{"name", queue.NewTask{Name: long}, "task name is 256 bytes, over the 255-byte limit (queue.MaxNameLength)"},
		{"queue", queue.NewTask{Name: "x", Options: []queue.Option{queue.WithQueue(long)}}, "queue name is 256 bytes, over the 255-byte limit (queue.MaxNameLength)"},
		{"unique key", queue.NewTask{Name: "x", Options: []queue.Option{queue.WithUniqueKey(key)}}, "unique key is 1,025 bytes, over the 1,024-byte limit (queue.MaxKeyLength)"},
		{"exclusive key", queue.NewTask{Name: "x", Options: []queue.Option{queue.WithExclusiveKey(key)}}, "exclusive key is 1,025 bytes"},
		{"limit key", queue.NewTask{Name: "x", Options: []queue.Option{queue.WithLimitKey(key)}}, "limit key is 1,025 bytes"},
		{"sequence key", queue.NewTask{Name: "x", Options: []queue.Option{queue.WithSequence(key)}}, "sequence key is 1,025 bytes"},
	} {
		_, err := c.Enqueue(ctx, tc.task.Name, nil, tc.task.Options...)
		check(tc.what, err, tc.want)
		if len(err.Error()) > 300 {
			t.Errorf("%s: the error quotes all of the value: %d bytes", tc.what, len(err.Error()))
		}
	}
	if n := count(t, pool, "true"); n != 0 {
		t.Fatalf("%d tasks inserted over the limits, want 0", n)
	}

	// At the limits: enqueued.
	if _, err := c.Enqueue(ctx, strings.Repeat("n", queue.MaxNameLength), jsonString(queue.DefaultMaxPayloadSize),
		queue.WithMetadata(json.RawMessage(`{"k":`+string(jsonString(queue.DefaultMaxMetadataSize-6))+`}`)),
		queue.WithQueue(strings.Repeat("q", queue.MaxNameLength)), queue.WithUniqueKey(key[1:])); err != nil {
		t.Fatalf("a task at every limit: %v", err)
	}

	// The options: a smaller limit, and none.
	small := queue.New(pool, queue.WithMaxPayloadSize(10), queue.WithMaxMetadataSize(20))
	_, err = small.Enqueue(ctx, "x", "123456789")
	check("WithMaxPayloadSize(10)", err, "payload is 11 bytes, over the 10-byte limit (queue.WithMaxPayloadSize)")
	_, err = small.Enqueue(ctx, "x", nil, queue.WithMetadata(json.RawMessage(`{"trace":"0123456789"}`)))
	check("WithMaxMetadataSize(20)", err, "metadata is 22 bytes, over the 20-byte limit (queue.WithMaxMetadataSize)")
	unlimited := queue.New(pool, queue.WithMaxPayloadSize(-1), queue.WithMaxMetadataSize(-1))
	if _, err := unlimited.Enqueue(ctx, "x", jsonString(2*queue.DefaultMaxPayloadSize),
		queue.WithMetadata(json.RawMessage(`{"k":`+string(jsonString(2*queue.DefaultMaxMetadataSize))+`}`))); err != nil {
		t.Fatalf("no limits: %v", err)
	}
	if _, err := queue.New(pool, queue.WithMaxPayloadSize(0)).Enqueue(ctx, "x", overPayload); !errors.Is(err, queue.ErrInvalidTask) {
		t.Fatalf("WithMaxPayloadSize(0) is the default: %v", err)
	}
}

// TestInputLimitsFromSQL: the SQL functions' limits come from the settings
// skiplock.max_payload_bytes and skiplock.max_metadata_bytes, the default
// when unset or 0, none when negative; a bad setting is named. Their
// refusals, interpreted, are ErrInvalidTask like the Go client's.
func TestInputLimitsFromSQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)

	// in runs sql in a transaction with the settings, and rolls it back.
	in := func(settings map[string]string, sql string) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // nothing to keep
		for k, v := range settings {
			if _, err := tx.Exec(ctx, "SELECT set_config($1, $2, true)", k, v); err != nil {
				t.Fatal(err)
			}
		}
		_, err = tx.Exec(ctx, sql)
		return err
	}
	const payload2MB = `SELECT skiplock_enqueue('x', to_jsonb(repeat('p', 2000000)))`
	for _, tc := range []struct {
		what     string
		settings map[string]string
		sql      string
		code     string // "" for success
		want     string
	}{
		{"default payload limit", nil, payload2MB, "22001",
			"skiplock: invalid task: payload is 2,000,002 bytes, over the 1,048,576-byte limit (skiplock.max_payload_bytes)"},
		{"0 is the default", map[string]string{"skiplock.max_payload_bytes": "0"}, payload2MB, "22001", "over the 1,048,576-byte limit"},
		{"raised", map[string]string{"skiplock.max_payload_bytes": "4194304"}, payload2MB, "", ""},
		{"none", map[string]string{"skiplock.max_payload_bytes": "-1"}, payload2MB, "", ""},
		{"lowered", map[string]string{"skiplock.max_payload_bytes": "10"}, `SELECT skiplock_enqueue('x', '"123456789"')`, "22001",
			"payload is 11 bytes, over the 10-byte limit (skiplock.max_payload_bytes)"},
		{"metadata", map[string]string{"skiplock.max_metadata_bytes": "10"}, `SELECT skiplock_enqueue('x', metadata => '{"k": "1234"}')`, "22001",
			"metadata is 13 bytes, over the 10-byte limit (skiplock.max_metadata_bytes)"},
		{"bad setting", map[string]string{"skiplock.max_payload_bytes": "1MB"}, `SELECT skiplock_enqueue('x')`, "22023",
			"skiplock: setting skiplock.max_payload_bytes is '1MB', not a number of bytes"},
		{"bad setting, many", map[string]string{"skiplock.max_metadata_bytes": "x"}, `SELECT * FROM skiplock_enqueue_many('[{"name": "x"}]')`, "22023",
			"skiplock: setting skiplock.max_metadata_bytes is 'x'"},
		{"sequence key", nil, `SELECT skiplock_enqueue('x', sequence_key => repeat('k', 1025))`, "22001",
			"sequence key is 1,025 bytes, over the 1,024-byte limit of sequence keys"},
		{"exclusive key, many", nil, `SELECT * FROM skiplock_enqueue_many(jsonb_build_array(jsonb_build_object('name', 'x', 'exclusive_key', repeat('k', 1025))))`, "22001",
			"skiplock: invalid task 1: exclusive key is 1,025 bytes"},
	} {
		err := in(tc.settings, tc.sql)
		if tc.code == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.what, err)
			}
			continue
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != tc.code || !strings.Contains(pgErr.Message, tc.want) {
			t.Errorf("%s: %v, want %s %q", tc.what, err, tc.code, tc.want)
			continue
		}
		// A task's refusal is the Go client's error class; a bad setting
		// is not the task's.
		interpreted := pgerr.Interpret(err)
		if got, want := errors.Is(interpreted, queue.ErrInvalidTask), !strings.Contains(tc.what, "setting"); got != want {
			t.Errorf("%s: interpreted %v: ErrInvalidTask %v, want %v", tc.what, interpreted, got, want)
		}
		if !errors.As(interpreted, &pgErr) {
			t.Errorf("%s: interpreted %v lost the server's error", tc.what, interpreted)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM skiplock_tasks").Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d tasks left, %v", n, err)
	}
	// The settings do not reach the Go client, which has its own.
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL skiplock.max_payload_bytes = 10"); err != nil {
			return err
		}
		_, err := queue.New(pool).EnqueueTx(ctx, tx, "x", "123456789")
		return err
	})
	if err != nil {
		t.Fatalf("the SQL setting applied to the Go client: %v", err)
	}
}
