// Package devpg finds a PostgreSQL server to run tests and examples against,
// booting a throwaway cluster when nothing is already running, so that
// "go test ./..." and the quickstart work on a fresh machine without setup.
//
// Find tries, in order: the environment variables named in Options.EnvVars,
// a server already listening on 127.0.0.1:5432 (or the Debian socket
// directory), and finally a private cluster created with initdb in a
// temporary directory. An environment variable that is set but unreachable
// is an error rather than a reason to fall through: a typo in DATABASE_URL
// should not silently send tests to a different database.
//
// Typical use in a test helper:
//
//	srv, err := devpg.Find(ctx, devpg.Options{
//		EnvVars: []string{"TEST_DATABASE_URL", "DATABASE_URL"},
//		Log:     os.Stderr,
//	})
//	if err != nil {
//		t.Fatal(err)
//	}
//	t.Cleanup(func() { srv.Close() })
//	conn, err := pgx.Connect(ctx, srv.URL)
//
// When the process runs as root (common in containers and CI), the
// throwaway cluster is run as the "postgres" user, or "nobody" if that does
// not exist, because initdb and postgres refuse to run as root.
package devpg
