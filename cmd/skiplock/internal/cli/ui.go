package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/skiplock/skiplock/queue/dashboard"
)

func (a *app) uiCommand() *cobra.Command {
	var listen, token string
	var refresh time.Duration
	cmd := newCommand(&cobra.Command{
		Use:   "ui",
		Short: "Serve the web dashboard: queues, tasks, failures, locks and workers",
		Long: `Serve a web dashboard of the schema's queues until interrupted: backlog
(due, retrying, scheduled), tasks completed and failed per minute over the
last hour (read from the table, with axes and values), paused queues with
pause and resume; tasks filtered by state, queue, name or error text, paged
by ID; a task's payload and every attempt with its error and worker, with
run now and delete; failed tasks to requeue or cancel, one at a time or in
bulk; a form to enqueue a task; periodic schedules and rate limits; the task
locks held now and the live workers; the audit trail of operator changes.
Pages refresh themselves every --refresh. Changes made here are recorded in
the audit trail as made by "skiplock ui", source dashboard.

With one --database-url per shard of a sharded queue, the first page lists
the queues of every shard with their totals, Tasks and Failed list every
shard's tasks, each naming its shard, bulk requeue and cancel act on every
shard, a task's ID leads to its shard's pages, and each shard's own
dashboard is under /shards/N/.

To serve the dashboard from your own application, behind its login, mount
package github.com/skiplock/skiplock/queue/dashboard instead.

It listens on 127.0.0.1:8080 by default, for this machine only. Any other
address needs a token, from --token or ` + uiTokenEnv + ` (preferred: flags
show in ps); browsers ask for it as the password of a login prompt, with any
user name, and scripts send "Authorization: Bearer TOKEN". Without a token it
refuses to listen beyond loopback.`,
		Example: `  skiplock ui                                   # http://127.0.0.1:8080/
  skiplock ui --listen 127.0.0.1:9000 --refresh 2s
  skiplock ui --database-url "$SHARD1_URL" --database-url "$SHARD2_URL"
  export ` + uiTokenEnv + `=$(openssl rand -hex 16)
  skiplock ui --listen 0.0.0.0:8080              # basic auth, password = the token`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if token == "" {
				token = a.env.Getenv(uiTokenEnv)
			}
			if err := checkListen(listen, token); err != nil {
				return usageErrorf("%v", err)
			}
			if refresh <= 0 {
				refresh = -1 // off; dashboard.Options takes zero for its default
			}
			log := slog.New(slog.NewTextHandler(a.env.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			dash, what, done, err := a.uiDashboard(cmd.Context(), dashboard.Options{
				Refresh: refresh,
				Logger:  log,
				Authorize: func(*http.Request, dashboard.Action) (string, error) {
					return uiActor, nil
				},
			})
			if err != nil {
				return err
			}
			defer done()
			err = serveUI(cmd.Context(), listen, &uiServer{token: token, dashboard: dash}, log, func(url string) {
				auth := ""
				if token != "" {
					auth = " (token required)"
				}
				fmt.Fprintf(a.env.Stdout, "skiplock ui: %s at %s%s\n", what, url, auth)
			})
			if errors.Is(err, errNoCredentials) {
				return usageErrorf("%v", err)
			}
			return err
		},
	})
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:8080", "address to listen on, HOST:PORT; beyond loopback it needs a token")
	f.StringVar(&token, "token", "", "require this token (as the basic auth password, or a bearer token); default $"+uiTokenEnv)
	durationVar(f, &refresh, "refresh", dashboard.DefaultRefresh, "how often pages refresh themselves; 0 turns it off")
	return cmd
}
