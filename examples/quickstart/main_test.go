package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// TestQuickstart runs the README's program against the services make test started.
func TestQuickstart(t *testing.T) {
	db, rd := os.Getenv("DATABASE_URL"), os.Getenv("REDIS_URL")
	if db == "" || rd == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("DATABASE_URL and REDIS_URL are not set (make test sets them)")
		}
		t.Skip("DATABASE_URL and REDIS_URL are not set; run make test")
	}
	var out bytes.Buffer
	if err := run(t.Context(), db, rd, &out); err != nil {
		t.Fatalf("quickstart: %v\n%s", err, out.String())
	}
	want := `customer-42 holds [A1 A2]
customer-7 is refused; taken: [A2]
booked [A1 A2] confirmed
the retry returns the same booking: true
`
	if out.String() != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}

// TestREADMEShowsThisProgram: the README's Go block is this program's, word for word.
func TestREADMEShowsThisProgram(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	begin, end := strings.Index(s, "// README:begin\n"), strings.Index(s, "\t// README:end")
	if begin < 0 || end < begin {
		t.Fatal("main.go lacks its README markers")
	}
	var block []string
	for _, line := range strings.Split(strings.TrimRight(s[begin+len("// README:begin\n"):end], "\n"), "\n") {
		block = append(block, strings.TrimPrefix(line, "\t"))
	}
	if !strings.Contains(string(readme), "```go\n"+strings.Join(block, "\n")+"\n```") {
		t.Fatal("README.md does not show examples/quickstart/main.go as it is; copy the block between the README markers")
	}
}
