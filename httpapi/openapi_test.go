package httpapi

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/holdfast/holdfast/engine"
	"github.com/holdfast/holdfast/internal/testsvc"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/redis/go-redis/v9"
)

// exchange is one request the tests made and the response they got.
type exchange struct {
	method, url, pattern string
	reqHeader            http.Header
	status               int
	header               http.Header
	body                 []byte
}

var (
	exchangesMu sync.Mutex
	exchanges   []exchange
)

// recordExchanges keeps every exchange of a test server, for TestMain to validate
// against the OpenAPI document.
func recordExchanges(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tee := &teeWriter{ResponseWriter: w}
		next.ServeHTTP(tee, r)
		if tee.status == 0 {
			tee.status = http.StatusOK
		}
		body := tee.body.Bytes()
		if w.Header().Get("Content-Encoding") == "gzip" { // validate the document, not its encoding
			zr, err := gzip.NewReader(bytes.NewReader(body))
			if err == nil {
				body, _ = io.ReadAll(zr)
			}
		}
		exchangesMu.Lock()
		exchanges = append(exchanges, exchange{method: r.Method, url: r.URL.String(), pattern: r.Pattern,
			reqHeader: r.Header.Clone(), status: tee.status, header: w.Header().Clone(), body: body})
		exchangesMu.Unlock()
	})
}

// teeWriter writes a response through (event streams included) and keeps a copy.
type teeWriter struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (t *teeWriter) WriteHeader(code int) {
	if t.status == 0 {
		t.status = code
	}
	t.ResponseWriter.WriteHeader(code)
}

func (t *teeWriter) Write(b []byte) (int, error) {
	if t.status == 0 {
		t.status = http.StatusOK
	}
	if t.body.Len() < 1<<20 {
		t.body.Write(b)
	}
	return t.ResponseWriter.Write(b)
}

func (t *teeWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }

// TestMain runs the package's tests, then checks every response they saw against the
// OpenAPI document, and that they saw every operation and every problem type in it:
// the document cannot drift from what the server does.
func TestMain(m *testing.M) {
	redis.SetLogger(quietRedis{}) // tests stop Redis on purpose; go-redis need not say so
	code := m.Run()
	if code == 0 && len(exchanges) > 0 && !testing.Short() {
		if err := checkOpenAPI(exchanges); err != nil {
			fmt.Fprintln(os.Stderr, "openapi:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func checkOpenAPI(xs []exchange) error {
	doc, err := libopenapi.NewDocument(OpenAPI)
	if err != nil {
		return err
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		return fmt.Errorf("the document: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		return fmt.Errorf("the document is not valid OpenAPI: %v", verrs[0])
	}
	var problems []string
	operations := map[string]bool{} // "GET /v1/…" seen with a documented answer
	types := map[string]bool{}
	for _, x := range xs {
		if x.status >= 400 {
			if t, ok := problemType(x.body); ok {
				types[t] = true
			}
		}
		if x.pattern == "/" || !strings.Contains(x.pattern, " ") {
			continue // no route (404) or another method (405): no operation to check against
		}
		operations[strings.Replace(x.pattern, "/{$}", "/", 1)] = true
		req := httptest.NewRequest(x.method, x.url, nil)
		req.Header = x.reqHeader
		resp := &http.Response{StatusCode: x.status, Header: x.header, Body: io.NopCloser(bytes.NewReader(x.body)), Request: req}
		if ok, verrs := v.ValidateHttpResponse(req, resp); !ok {
			for _, e := range verrs {
				problems = append(problems, fmt.Sprintf("%s %s -> %d: %s (%s) body %.200s", x.method, x.url, x.status, e.Message, e.Reason, x.body))
			}
		}
	}
	// Every operation and problem type must be seen by the whole suite; a run of some
	// tests (-run) checks only what they sent.
	if f := flag.Lookup("test.run"); f != nil && f.Value.String() != "" {
		operations, types = nil, nil
	}
	for _, op := range documentedOperations(doc) {
		if operations != nil && !operations[op] {
			problems = append(problems, "no test exercised "+op)
		}
	}
	// internal: only a bug produces it. The listener's own refusals of a request net/http
	// could not parse never reach a handler (so no recorder here sees them): the serve
	// command's tests send them over real sockets (TestPlainHTTPErrorsAreProblems).
	unrecordable := []string{"internal", "headers-too-large", "not-implemented", "unsupported-version"}
	for _, t := range documentedProblemTypes() {
		if types != nil && !types[t] && !slices.Contains(unrecordable, strings.TrimPrefix(t, problemPrefix)) {
			problems = append(problems, "no test saw the problem type "+t)
		}
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		problems = slices.Compact(problems)
		return fmt.Errorf("%d mismatches:\n  %s", len(problems), strings.Join(problems, "\n  "))
	}
	return nil
}

// documentedOperations lists the document's operations as ServeMux patterns ("GET /livez").
func documentedOperations(doc libopenapi.Document) []string {
	m, err := doc.BuildV3Model()
	if err != nil {
		return []string{"(the document does not build: " + err.Error() + ")"}
	}
	var out []string
	for path, item := range m.Model.Paths.PathItems.FromOldest() {
		for method := range item.GetOperations().FromOldest() {
			out = append(out, strings.ToUpper(method)+" "+path)
		}
	}
	return out
}

// documentedProblemTypes lists the problem types the document names.
func documentedProblemTypes() []string {
	var out []string
	for _, line := range strings.Split(string(OpenAPI), "\n") {
		if t, ok := strings.CutPrefix(strings.TrimSpace(line), "- "+problemPrefix); ok {
			out = append(out, problemPrefix+t)
		}
	}
	return out
}

func problemType(body []byte) (string, bool) {
	var p struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(body, &p) != nil || p.Type == "" {
		return "", false
	}
	return p.Type, true
}

// TestOpenAPIServed: the document is served as it is embedded.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	a := newAPI(t, testsvc.Redis(t), engine.Config{}, Options{})
	r := a.do("GET", "/openapi.yaml", "", "", nil)
	if r.status != 200 || r.raw != string(OpenAPI) || !strings.HasPrefix(r.header.Get("Content-Type"), "application/yaml") {
		t.Fatalf("GET /openapi.yaml: %d %q", r.status, r.header.Get("Content-Type"))
	}
}

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}
