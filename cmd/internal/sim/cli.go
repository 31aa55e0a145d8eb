package sim

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Main is the command line of the celflow-sim binary: `celflow-sim
// [flags]` runs a simulated vLLM worker, `celflow-sim gateway [flags]` an
// Inference Gateway + EPP stand-in. docs/simulator.md documents both. It
// serves until ctx ends (the binary's ctx ends on SIGINT or SIGTERM).
// Exit codes: 0 once ctx ended, 1 on a runtime error, 2 on bad flags.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "gateway" {
		return mainGateway(ctx, args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("celflow-sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8000", "address to listen on (port 0 picks a free port)")
	roles := fs.String("roles", "render,encode,prefill,decode", "comma-separated roles this process serves")
	var cfg Config
	fs.StringVar(&cfg.Name, "name", "sim", "worker name, shown in records and engine ids")
	fs.StringVar(&cfg.Model, "model", "sim-model", "model name answered when a request names none")
	fs.DurationVar(&cfg.TTFT, "ttft", 0, "time to first token")
	fs.DurationVar(&cfg.ITL, "itl", 0, "inter-token latency")
	fs.IntVar(&cfg.OutputTokens, "output-tokens", 16, "natural answer length in tokens (min_tokens/max_tokens still apply)")
	fs.StringVar(&cfg.SharedDir, "shared-dir", "", "kv-shared-storage directory (default $TMPDIR/celflow-sim-kv)")
	fs.IntVar(&cfg.PrefixCacheSize, "kv-cache-blocks", 4096, "KV cache capacity in blocks (LRU; lost on restart)")
	fs.IntVar(&cfg.PrefixCacheSize, "prefix-cache-size", 4096, "the former name of --kv-cache-blocks")
	fs.IntVar(&cfg.BlockSize, "block-size", DefaultBlockSize, "KV block size in tokens (only whole blocks are cached)")
	fs.DurationVar(&cfg.PrefillPerToken, "prefill-per-token", 0, "prefill time per uncached prompt token, added to --ttft")
	fs.IntVar(&cfg.RecordLimit, "records", 1024, "request records kept")
	fs.IntVar(&cfg.RecordBodyLimit, "record-body-limit", 1<<20, "bytes of each body kept in a record")
	fs.DurationVar(&cfg.BootstrapWait, "bootstrap-wait", 10*time.Second, "how long an SGLang prefill waits for decode to join its room (0 answers at once)")
	fs.DurationVar(&cfg.KVLease, "kv-lease", 30*time.Second, "how long produced KV stays pullable")
	fs.StringVar(&cfg.Advertise, "advertise", "", "host:port peers reach this worker on (default: the address each request arrived at)")
	fs.BoolVar(&cfg.Deterministic, "deterministic", false, "answer every request continuably: prompt + a prefix of its answer yields the rest (see docs/simulator.md)")
	var kvc KVEventsConfig
	fs.StringVar(&kvc.Endpoint, "kv-events-endpoint", "", "publish vLLM-format KV events on a PUB socket bound here (tcp://host:port, tcp://*:5557 as vLLM's default; port 0 picks one)")
	fs.StringVar(&kvc.Connect, "kv-events-connect", "", "publish KV events on a PUB socket connecting here instead (a subscriber that binds, e.g. celflow's upstream.kv_events.bind)")
	fs.StringVar(&kvc.Replay, "kv-events-replay-endpoint", "", "bind a ROUTER here that replays the last batches on request (vLLM's replay_endpoint)")
	fs.StringVar(&kvc.Topic, "kv-events-topic", "", "the topic of every event message (vLLM's default is empty; llm-d uses kv@<pod>@<model>)")
	fs.StringVar(&kvc.Encoding, "kv-events-encoding", "map", "msgpack layout of the batches: map (named fields, current vLLM) or array (array_like, earlier vLLM)")
	fs.Uint64Var(&kvc.HashSeed, "kv-hash-seed", 0, "seed of the engine block hashes the events carry (celflow's index must not depend on it)")
	keepAlive := fs.Duration("keep-alive", DefaultKeepAlive, "idle keep-alive of client connections (uvicorn's is 5s)")
	tf := tlsFlags(fs)
	var loras loraFlag
	fs.Var(&loras, "lora", "serve LoRA adapters: name[=parent][,...] (repeatable; parent defaults to --model): listed in /v1/models, their own KV blocks, lora_name/lora_id in KV events")
	var faults faultFlag
	fs.Var(&faults, "fault", "inject a fault: [role:]action[,action...] (repeatable; see docs/simulator.md)")
	if err := fs.Parse(args); err != nil {
		return exitUsage(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "celflow-sim: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	var err error
	if cfg.Roles, err = ParseRoles(*roles); err != nil {
		fmt.Fprintf(stderr, "celflow-sim: --roles: %v\n", err)
		return 2
	}
	cfg.Faults = faults
	cfg.LoRA = loras
	w, err := NewWorker(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "celflow-sim: %v\n", err)
		return 2
	}
	if kvc.Enabled() {
		if err := w.PublishKVEvents(kvc); err != nil {
			fmt.Fprintf(stderr, "celflow-sim: %v\n", err)
			return 2
		}
		defer w.Close()
	} else if kvc.Replay != "" {
		fmt.Fprintln(stderr, "celflow-sim: --kv-events-replay-endpoint needs --kv-events-endpoint or --kv-events-connect")
		return 2
	}
	return serveSim(ctx, "celflow-sim", *listen, w, *keepAlive, tf, stdout, stderr)
}

func mainGateway(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("celflow-sim gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8081", "address to listen on (port 0 picks a free port)")
	var cfg GatewayConfig
	encode := fs.String("encode", "", "comma-separated base URLs of the encode pool")
	prefill := fs.String("prefill", "", "comma-separated base URLs of the prefill pool")
	decode := fs.String("decode", "", "comma-separated base URLs of the decode pool")
	fs.StringVar(&cfg.Default, "default", "", "base URL for requests without EPP-Profile (default: answer 400)")
	fs.StringVar(&cfg.Name, "name", "gateway", "name shown in records")
	fs.IntVar(&cfg.PrefixCacheSize, "prefix-cache-size", 4096, "prefix hashes kept per decode endpoint")
	fs.IntVar(&cfg.RecordLimit, "records", 1024, "request records kept")
	fs.IntVar(&cfg.RecordBodyLimit, "record-body-limit", 1<<20, "bytes of each body kept in a record")
	keepAlive := fs.Duration("keep-alive", 60*time.Second, "idle keep-alive of client connections")
	tf := tlsFlags(fs)
	upstreamCA := fs.String("upstream-ca", "", "PEM bundle verifying https:// pool members (default: the system roots)")
	if err := fs.Parse(args); err != nil {
		return exitUsage(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "celflow-sim gateway: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	cfg.Encode, cfg.Prefill, cfg.Decode = splitList(*encode), splitList(*prefill), splitList(*decode)
	if *upstreamCA != "" {
		pool, err := caPool(*upstreamCA)
		if err != nil {
			fmt.Fprintf(stderr, "celflow-sim gateway: --upstream-ca: %v\n", err)
			return 2
		}
		cfg.UpstreamTLS = &tls.Config{RootCAs: pool}
	}
	g, err := NewGateway(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "celflow-sim gateway: %v\n", err)
		return 2
	}
	return serveSim(ctx, "celflow-sim gateway", *listen, g, *keepAlive, tf, stdout, stderr)
}

func serveSim(ctx context.Context, name, listen string, h http.Handler, keepAlive time.Duration, tf *simTLS, stdout, stderr io.Writer) int {
	conf, err := tf.config()
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	if err := ServeTLS(ctx, listen, h, stdout, keepAlive, conf); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	return 0
}

func exitUsage(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// faultFlag collects repeated --fault flags.
type faultFlag []Fault

func (f *faultFlag) String() string {
	var s []string
	for _, x := range *f {
		s = append(s, string(x.Role)+":"+x.String())
	}
	return strings.Join(s, "; ")
}

func (f *faultFlag) Set(v string) error {
	fs, err := ParseFaults(v)
	if err != nil {
		return err
	}
	*f = append(*f, fs...)
	return nil
}

var _ flag.Value = (*faultFlag)(nil)

// Start runs Main in-process with args (tests and tools that want a
// simulator without a child process): it returns the URL from the first
// line Main prints ("listening on URL") and a stop func that cancels it and
// yields its exit code. It fails when no such line comes within 10 s.
func Start(args []string) (url string, stop func() int, err error) {
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	var stderr bytes.Buffer
	code := make(chan int, 1)
	go func() {
		code <- Main(ctx, args, pw, &stderr)
		pw.Close()
	}()
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(pr).ReadString('\n')
		lines <- line
		_, _ = io.Copy(io.Discard, pr)
	}()
	select {
	case line := <-lines:
		u, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
		if !ok || !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			cancel()
			<-code
			return "", nil, fmt.Errorf("celflow-sim: first line %q (stderr %q)", line, stderr.String())
		}
		return u, func() int { cancel(); return <-code }, nil
	case <-time.After(10 * time.Second):
		cancel()
		return "", nil, errors.New("celflow-sim: no listening line within 10s")
	}
}
