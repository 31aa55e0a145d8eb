//go:build llmdap

// The quota key and the envelope read by llm-d-async's own code: not a
// re-statement of its Redis commands (quota_test.go) but its packages,
// built from a checkout of github.com/llm-d/llm-d-async named by
// LLMD_ASYNC_SRC (the module proxy does not serve that module, so a pinned
// version cannot be fetched; nothing of it is in this repository). Checked
// against commit 5de949bfcc4b81f75845d7516b605dea889a84f1 (2026-08-07):
//
//	git clone https://github.com/llm-d/llm-d-async /tmp/llm-d-async
//	LLMD_ASYNC_SRC=/tmp/llm-d-async go test -tags llmdap -run TestLLMDAsyncOwnCode ./connectors/async/
//
// It needs the network for the processor's dependencies (GOPROXY).
package async

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/celflow/celflow/connectors/async/redistest"
)

// apProgram parses the first envelope of a queue with the processor's own
// types (api.InternalRequest) and applies its redis-quota gate
// (pkg/redis.RedisQuotaGate, rate-limit mode, classifying) n times.
const apProgram = `package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/llm-d/llm-d-async/api"
	"github.com/llm-d/llm-d-async/pipeline"
	gate "github.com/llm-d/llm-d-async/pkg/redis"
	goredis "github.com/redis/go-redis/v9"
)

func main() {
	ctx := context.Background()
	rdb := goredis.NewClient(&goredis.Options{Addr: os.Args[1]})
	limit, _ := strconv.Atoi(os.Args[3])
	window, _ := time.ParseDuration(os.Args[4])
	n, _ := strconv.Atoi(os.Args[5])
	g := gate.NewRedisQuotaGate(rdb, "userid", gate.QuotaModeRateLimit, limit, window, "quota:").WithGatingMode(gate.GatingModeClassifying)
	zs, err := rdb.ZRange(ctx, os.Args[2], 0, -1).Result()
	if err != nil || len(zs) == 0 {
		fmt.Println("queue:", len(zs), err)
		os.Exit(1)
	}
	var ir api.InternalRequest
	if err := json.Unmarshal([]byte(zs[0]), &ir); err != nil {
		fmt.Println("envelope:", err)
		os.Exit(1)
	}
	fmt.Printf("id=%s userid=%s token=%s result=%s\n", ir.PublicRequest.ReqID(), ir.PublicRequest.ReqMetadata()["userid"], ir.RequestToken, ir.ResultQueueName)
	for i := 0; i < n; i++ {
		var rel []pipeline.GateReleaseFunc
		if _, err := g.Apply(ctx, &ir, &rel); err != nil {
			fmt.Println("error", err)
			continue
		}
		fmt.Println("class", ir.GetClassification())
	}
}
`

func TestLLMDAsyncOwnCode(t *testing.T) {
	src := os.Getenv("LLMD_ASYNC_SRC")
	if src == "" {
		t.Fatal("LLMD_ASYNC_SRC must name a checkout of github.com/llm-d/llm-d-async")
	}
	src, _ = filepath.Abs(src)
	ctx := context.Background()
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	l := NewLLMD(rdb, LLMDConfig{})

	// celflow: one queued request and two passthrough admissions for team-a.
	j := job("x", `{"model":"m"}`)
	j.Tenant, j.Queue = "team-a", "q-a"
	if _, err := l.Submit(ctx, j); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if ok, err := l.TakeQuota(ctx, "quota:userid:team-a", 3, time.Minute); !ok || err != nil {
			t.Fatalf("celflow admission %d: %v %v", i, ok, err)
		}
	}
	// The former layout, a plain counter, for team-b: the processor must
	// fail on it (the test can see the clash the sorted set removes).
	jb := job("y", `{"model":"m"}`)
	jb.Tenant, jb.Queue = "team-b", "q-b"
	if _, err := l.Submit(ctx, jb); err != nil {
		t.Fatal(err)
	}
	rdb.Set(ctx, "quota:userid:team-b", 1, time.Minute)

	dir := t.TempDir()
	mod := "module apcheck\n\ngo 1.26.0\n\nrequire github.com/llm-d/llm-d-async v0.0.0\n\n"
	for _, p := range []string{"", "/api", "/pipeline", "/producer"} {
		mod += "replace github.com/llm-d/llm-d-async" + p + " => " + src + p + "\n"
	}
	sum, err := os.ReadFile(filepath.Join(src, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"go.mod": mod, "go.sum": string(sum), "main.go": apProgram} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	goCmd := func(args ...string) string {
		cx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(cx, "go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	goCmd("mod", "tidy")
	goCmd("build", "-o", "ap", ".")
	run := func(queue string) string {
		out, err := exec.Command(filepath.Join(dir, "ap"), srv.Addr, queue, "3", "1m", "3").CombinedOutput()
		if err != nil {
			t.Fatalf("processor: %v\n%s", err, out)
		}
		return string(out)
	}

	out := run("q-a")
	want := "id=team-a:x userid=team-a token=" + rdb.Get(ctx, "request-active:team-a:x").Val() +
		" result=results:req:team-a:x:" + rdb.Get(ctx, "request-active:team-a:x").Val() + "\n" +
		"class reserved\nclass overflow\nclass overflow\n"
	if out != want {
		t.Fatalf("the processor on celflow's envelope and quota key:\n%s\nwant\n%s", out, want)
	}
	// Its admission counts for celflow too.
	if ok, err := l.TakeQuota(ctx, "quota:userid:team-a", 3, time.Minute); ok || err != nil {
		t.Fatalf("celflow after the processor's admission: %v %v, want overflow", ok, err)
	}
	if out := run("q-b"); !strings.Contains(out, "WRONGTYPE") {
		t.Fatalf("the processor on a plain counter: %s", out)
	}
}
