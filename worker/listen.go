package worker

import (
	"context"
	"log/slog"
	"sync"

	"github.com/jackc/pgx/v5"
)

// listener keeps a connection LISTENing on the schema's channels: a
// notification on the work channel names a queue to wake, one on the
// control channel is a command to the workers. Notifications only hasten
// things; polls cover any that are missed while reconnecting.
type listener struct {
	config    *pgx.ConnConfig                    // nil: no LISTEN, the worker polls
	work      string                             // channel of queue names
	control   string                             // channel of commands (internal/control)
	onWork    func(queueName string, pid uint32) // pid: the backend that sent it
	onControl func(msg string)
	// onListen runs each time LISTEN holds again: work may have arrived
	// while no one listened.
	onListen func()
	log      *slog.Logger
	// listening is closed once the first LISTEN holds, or the listener
	// gives up.
	listening chan struct{}
}

func (l *listener) run(ctx context.Context) {
	var once sync.Once
	defer once.Do(func() { close(l.listening) })
	if l.config == nil {
		return
	}
	config := l.config
	if config.RuntimeParams == nil {
		config.RuntimeParams = map[string]string{}
	}
	config.RuntimeParams["application_name"] = "skiplock listener"
	r := newRedial(&config.Config)
	o := &outage{log: l.log, what: "listener (polling until it is back)"}
	for ctx.Err() == nil {
		conn, err := pgx.ConnectConfig(ctx, config)
		if err == nil {
			// LISTEN takes no parameters, so the channels are quoted here;
			// both in one simple query, one round trip.
			_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{l.work}.Sanitize()+"; LISTEN "+pgx.Identifier{l.control}.Sanitize())
			if err == nil {
				r.succeeded()
				o.ok()
				once.Do(func() { close(l.listening) })
				l.onListen()
				for {
					n, werr := conn.WaitForNotification(ctx)
					if werr != nil {
						err = werr
						break
					}
					if n.Channel == l.control {
						l.onControl(n.Payload)
					} else {
						l.onWork(n.Payload, n.PID)
					}
				}
			}
			conn.Close(context.Background())
		}
		if ctx.Err() != nil {
			return
		}
		r.failed(err)
		o.failed(err, "retry_in", r.next())
		if !r.sleep(ctx) {
			return
		}
	}
}
