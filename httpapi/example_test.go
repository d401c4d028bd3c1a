package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/httpapi"
	"github.com/holdfast/holdfast/migrations"
)

// A booking backend mounts the API in its own mux, behind its own authentication: it
// knows its customer from the session and tells holdfast who they are in Holder-Id.
func Example_mount() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, envOr("DATABASE_URL", "postgres://holdfast@127.0.0.1:25432/holdfast?sslmode=disable"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	if err := migrations.Up(ctx, pool); err != nil {
		fmt.Println(err)
		return
	}
	opt, err := redis.ParseURL(envOr("REDIS_URL", "redis://127.0.0.1:26379/0"))
	if err != nil {
		fmt.Println(err)
		return
	}
	opt.ContextTimeoutEnabled = true
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	e, err := engine.New(pool, rdb, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()
	show := "gala-" + uuid.NewString()[:8]
	if err := e.CreateShow(ctx, show, []string{"A1", "A2"}); err != nil {
		fmt.Println(err)
		return
	}

	api, err := httpapi.New(e, httpapi.Options{}) // no operator token: shows are created in Go
	if err != nil {
		fmt.Println(err)
		return
	}
	sessions := map[string]string{"cookie-1": "customer-42"} // the backend's own sessions
	mux := http.NewServeMux()
	mux.Handle("/v1/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		customer, ok := sessions[r.Header.Get("Session")]
		if !ok {
			http.Error(w, "log in first", http.StatusUnauthorized)
			return
		}
		r.Header.Set(httpapi.HolderHeader, customer) // never taken from the client
		api.ServeHTTP(w, r)
	}))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for _, session := range []string{"cookie-1", ""} {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/shows/"+show+"/holds", strings.NewReader(`{"seats":["A1"]}`))
		req.Header.Set("Session", session)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Printf("session %q: %s\n", session, resp.Status)
	}
	// Output:
	// session "cookie-1": 201 Created
	// session "": 401 Unauthorized
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
