package dashboard

import "testing"

func TestRedactPasswords(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`cannot connect to postgres://app:s3cret@db:5432/app: refused`: `cannot connect to postgres://app:xxxxx@db:5432/app: refused`,
		`dial postgresql://app:p%40ss@db/app?sslmode=require`:          `dial postgresql://app:xxxxx@db/app?sslmode=require`,
		`postgres://db/app?user=app&password=s3cret&sslmode=disable`:   `postgres://db/app?user=app&password=xxxxx&sslmode=disable`,
		`host=db user=app password=s3cret dbname=app`:                  `host=db user=app password=xxxxx dbname=app`,
		`host=db password='with space\' quote' dbname=app`:             `host=db password=xxxxx dbname=app`,
		`PASSWORD = s3cret`: `PASSWORD = xxxxx`,
		`failed to connect to user=app database=app: connection refused`:   `failed to connect to user=app database=app: connection refused`,
		`postgres://app@db/app (no password)`:                              `postgres://app@db/app (no password)`,
		`a task's error: http://example.com/x says 503, user:pass@nothing`: `a task's error: http://example.com/x says 503, user:pass@nothing`,
	} {
		if got := redactPasswords(in); got != want {
			t.Errorf("redactPasswords(%q) = %q, want %q", in, got, want)
		}
	}
}
