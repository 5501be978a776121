package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/skiplock/skiplock/internal/testinfra/pgtest"
	"github.com/skiplock/skiplock/queue"
	"github.com/skiplock/skiplock/queue/dashboard"
)

type userKey struct{}

// requireLogin stands in for an application's login middleware: it puts
// the user into the request's context, or refuses the request.
func requireLogin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user := r.Header.Get("X-User") // a session cookie, in a real application
		if user == "" {
			http.Error(w, "log in first", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, user)))
	})
}

// The dashboard mounted under /admin/jobs of an application, behind its
// login: the logged-in user is who the audit trail records.
func Example() {
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	client := queue.New(pool)

	dash, err := dashboard.New(client, dashboard.Options{
		Prefix: "/admin/jobs",
		Authorize: func(r *http.Request, a dashboard.Action) (string, error) {
			user, _ := r.Context().Value(userKey{}).(string)
			return user, nil
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	mux := http.NewServeMux()
	mux.Handle("/admin/jobs/", requireLogin(http.StripPrefix("/admin/jobs", dash)))

	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, user := range []string{"", "alice"} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/admin/jobs/tasks", nil)
		req.Header.Set("X-User", user)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Printf("%q: %s\n", user, resp.Status)
	}
	// Output:
	// "": 401 Unauthorized
	// "alice": 200 OK
}
