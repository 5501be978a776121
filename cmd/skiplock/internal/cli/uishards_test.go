package cli_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/skiplock/skiplock/cmd/skiplock/internal/cli"
	"github.com/skiplock/skiplock/queue"
)

// With a --database-url per shard, `skiplock ui` serves the dashboard over
// every shard.
func TestUIShards(t *testing.T) {
	t.Parallel()
	bs := shardBundles(t, 1, 2)
	one := bs[0].insert(t, "mail", "send", queue.StatusFailed, 3, 3, "smtp: 451 try later")
	two := bs[1].insert(t, "reports", "build", queue.StatusFailed, 1, 1, "out of memory")
	args := []string{"ui", "--listen", "127.0.0.1:0", "--refresh", "0"}
	for _, b := range bs {
		args = append(args, "--database-url", b.url)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out, w := io.Pipe()
	var stderr strings.Builder
	done := make(chan int, 1)
	go func() {
		done <- cli.Run(ctx, args, cli.Env{Stdout: w, Stderr: &stderr, Getenv: func(string) string { return "" }})
		w.Close()
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != cli.ExitOK {
			t.Errorf("skiplock ui exited %d: %s", code, stderr.String())
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("skiplock ui printed no URL: %v (stderr: %s)", err, stderr.String())
	}
	go io.Copy(io.Discard, out)
	url := regexp.MustCompile(`http://\S+/`).FindString(line)
	if url == "" || !strings.Contains(line, "shards 1 and 2") {
		t.Fatalf("skiplock ui printed %q, want the shards and a URL", line)
	}

	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(url + "failed")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{fmt.Sprintf(`href="/shards/1/tasks/%d"`, one), fmt.Sprintf(`href="/shards/2/tasks/%d"`, two)} {
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			t.Fatalf("GET /failed: %s, %s not found:\n%s", resp.Status, want, body)
		}
	}
}
