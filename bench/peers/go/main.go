// dbx-peer-go: the Go SDK side of durabox's benchmark matrix (bench/matrix.sh).
//
//	dbx-peer-go worker --address HOST:PORT --task-queue Q [--pollers N]
//	    registers the workflows bench.Chain (input {"n":N}: N no-op activities
//	    one after another) and bench.Hold (input {"ms":M}: one activity that
//	    sleeps M ms), and the activities bench.noop and bench.sleep. Runs
//	    until SIGTERM/SIGINT.
//	dbx-peer-go drive --address HOST:PORT --task-queue Q --type T --input JSON
//	    (--seconds S --concurrency C | --workflows N --concurrency C)
//	    closed loop: at most C workflows in flight; starts a new one as each
//	    completes, until S seconds have passed (then waits for those in
//	    flight) or N workflows were started. Prints one JSON object: completed,
//	    failed, wall seconds, workflows/s, start->completed p50/p99/max in ms
//	    and its own CPU seconds and peak RSS (so a saturated driver shows).
//
// The C worker (bench/peer_worker.c) and the TypeScript worker
// (bench/peers/ts/worker.js) register the same names with the same inputs.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// In is the input of every bench workflow and activity.
type In struct {
	N  int `json:"n,omitempty"`
	Ms int `json:"ms,omitempty"`
}

func chainWorkflow(ctx workflow.Context, in In) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 30 * time.Second})
	for i := 0; i < in.N; i++ {
		if err := workflow.ExecuteActivity(ctx, "bench.noop", in).Get(ctx, nil); err != nil {
			return err
		}
	}
	return nil
}

func holdWorkflow(ctx workflow.Context, in In) error {
	to := time.Duration(in.Ms)*time.Millisecond + 120*time.Second
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: to})
	return workflow.ExecuteActivity(ctx, "bench.sleep", in).Get(ctx, nil)
}

func noopActivity(ctx context.Context, in In) error { return nil }

func sleepActivity(ctx context.Context, in In) error {
	select {
	case <-time.After(time.Duration(in.Ms) * time.Millisecond):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func dial(addr string) client.Client {
	c, err := client.Dial(client.Options{HostPort: addr, Namespace: "default", Logger: log.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))})
	if err != nil {
		fmt.Fprintln(os.Stderr, "dbx-peer-go: dial:", err)
		os.Exit(1)
	}
	return c
}

func runWorker(args []string) {
	fs := flag.NewFlagSet("worker", flag.ExitOnError)
	addr := fs.String("address", "127.0.0.1:7233", "service address")
	tq := fs.String("task-queue", "bench", "task queue")
	pollers := fs.Int("pollers", 0, "pollers of each kind (0 = SDK default)")
	fs.Parse(args)
	c := dial(*addr)
	defer c.Close()
	o := worker.Options{MaxConcurrentActivityExecutionSize: 20000, MaxConcurrentWorkflowTaskExecutionSize: 1000}
	if *pollers > 0 {
		o.MaxConcurrentWorkflowTaskPollers = *pollers
		o.MaxConcurrentActivityTaskPollers = *pollers
	}
	w := worker.New(c, *tq, o)
	w.RegisterWorkflowWithOptions(chainWorkflow, workflow.RegisterOptions{Name: "bench.Chain"})
	w.RegisterWorkflowWithOptions(holdWorkflow, workflow.RegisterOptions{Name: "bench.Hold"})
	w.RegisterActivityWithOptions(noopActivity, activity.RegisterOptions{Name: "bench.noop"})
	w.RegisterActivityWithOptions(sleepActivity, activity.RegisterOptions{Name: "bench.sleep"})
	stop := make(chan interface{})
	go func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
		<-ch
		close(stop)
	}()
	if err := w.Run(stop); err != nil {
		fmt.Fprintln(os.Stderr, "dbx-peer-go: worker:", err)
		os.Exit(1)
	}
}

func pct(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	k := int(math.Ceil(q * float64(len(v))))
	if k < 1 {
		k = 1
	}
	if k > len(v) {
		k = len(v)
	}
	return v[k-1]
}

func runDrive(args []string) {
	fs := flag.NewFlagSet("drive", flag.ExitOnError)
	addr := fs.String("address", "127.0.0.1:7233", "service address")
	tq := fs.String("task-queue", "bench", "task queue")
	typ := fs.String("type", "bench.Chain", "workflow type")
	input := fs.String("input", `{"n":1}`, "workflow input (JSON)")
	secs := fs.Float64("seconds", 0, "start workflows for this long (closed loop)")
	total := fs.Int("workflows", 0, "start this many workflows (when --seconds is 0)")
	conc := fs.Int("concurrency", 64, "workflows in flight")
	timeout := fs.Duration("timeout", 60*time.Second, "give up on one workflow after this long")
	prefix := fs.String("id-prefix", fmt.Sprintf("bench-%d", time.Now().UnixNano()), "workflow id prefix")
	fs.Parse(args)
	var in In
	if err := json.Unmarshal([]byte(*input), &in); err != nil {
		fmt.Fprintln(os.Stderr, "dbx-peer-go: --input:", err)
		os.Exit(2)
	}
	c := dial(*addr)
	defer c.Close()
	var next, failed int64
	var mu sync.Mutex
	var lat []float64
	var firstErr atomic.Value
	t0 := time.Now()
	deadline := t0.Add(time.Duration(*secs * float64(time.Second)))
	var wg sync.WaitGroup
	for g := 0; g < *conc; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if *secs > 0 && time.Now().After(deadline) {
					return
				}
				i := atomic.AddInt64(&next, 1)
				if *secs <= 0 && i > int64(*total) {
					return
				}
				s := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), *timeout)
				run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
					ID: fmt.Sprintf("%s-%d", *prefix, i), TaskQueue: *tq}, *typ, in)
				if err == nil {
					err = run.Get(ctx, nil)
				}
				cancel()
				if err != nil {
					atomic.AddInt64(&failed, 1)
					firstErr.CompareAndSwap(nil, err.Error())
					time.Sleep(10 * time.Millisecond)
					continue
				}
				d := float64(time.Since(s).Microseconds()) / 1000
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	wall := time.Since(t0).Seconds()
	sort.Float64s(lat)
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	cpu := float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
	out := map[string]interface{}{
		"completed": len(lat), "failed": failed, "wall_s": wall,
		"wf_per_s": float64(len(lat)) / wall,
		"p50_ms":   pct(lat, 0.5), "p99_ms": pct(lat, 0.99), "max_ms": pct(lat, 1),
		"driver_cpu_s": cpu, "driver_rss_kib": ru.Maxrss,
	}
	if e := firstErr.Load(); e != nil {
		out["first_error"] = e
	}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
	if len(lat) == 0 {
		os.Exit(1)
	}
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: dbx-peer-go worker|drive [flags]")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "worker":
		runWorker(os.Args[2:])
	case "drive":
		runDrive(os.Args[2:])
	default:
		fmt.Fprintln(os.Stderr, "usage: dbx-peer-go worker|drive [flags]")
		os.Exit(2)
	}
}
