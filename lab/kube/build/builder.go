package build

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"
)

// builder runs one build; every command's output goes to its log file.
type builder struct {
	o       Options
	work    string // the generated module, beside the cache (never in a source tree)
	logPath string
	log     *os.File
	start   time.Time
	step    int
}

const steps = 7

func newBuilder(o Options) *builder {
	return &builder{
		o:       o,
		work:    filepath.Join(o.CacheDir, ".work-"+o.Version),
		logPath: filepath.Join(o.CacheDir, "build-"+o.Version+".log"),
	}
}

func (b *builder) run(ctx context.Context) (Stamp, error) {
	b.start = time.Now()
	if err := os.RemoveAll(b.work); err != nil {
		return Stamp{}, &StepError{Step: "prepare", Err: err}
	}
	if err := os.MkdirAll(b.work, 0o755); err != nil {
		return Stamp{}, &StepError{Step: "prepare", Err: err}
	}
	log, err := os.Create(b.logPath)
	if err != nil {
		return Stamp{}, &StepError{Step: "prepare", Err: err}
	}
	b.log = log
	defer log.Close()
	s, err := b.steps(ctx)
	if err != nil {
		b.tail()
		return Stamp{}, err
	}
	// The generated module is only the means; the log stays for the record.
	os.RemoveAll(b.work)
	fmt.Fprintf(b.o.Progress, "kube-build: kubernetes %s installed in %s in %s\n",
		b.o.Version, ReleaseDir(b.o.CacheDir, b.o.Version), s.BuildTime)
	return s, nil
}

func (b *builder) steps(ctx context.Context) (Stamp, error) {
	goVersion, err := b.output(ctx, "go-version", false, b.o.Go, "env", "GOVERSION")
	if err != nil {
		return Stamp{}, err
	}
	up, err := b.upstream(ctx)
	if err != nil {
		return Stamp{}, err
	}
	if err := b.generate(up); err != nil {
		return Stamp{}, err
	}
	b.begin("tidy", "go mod tidy: resolve and download the dependencies")
	if err := b.exec(ctx, "tidy", b.goEnv(true), nil, b.o.Go, "mod", "tidy"); err != nil {
		return Stamp{}, err
	}
	bin := filepath.Join(b.work, "bin")
	if err := b.compile(ctx, bin); err != nil {
		return Stamp{}, err
	}
	if err := b.verify(ctx, bin); err != nil {
		return Stamp{}, err
	}
	return b.install(bin, strings.TrimSpace(goVersion))
}

// upstream downloads k8s.io/kubernetes and reads its go.mod from the
// module cache.
func (b *builder) upstream(ctx context.Context) (upstream, error) {
	b.begin("download", "go mod download "+KubernetesModule+"@"+b.o.Version)
	out, err := b.output(ctx, "download", false, b.o.Go, "mod", "download", "-json", KubernetesModule+"@"+b.o.Version)
	if err != nil {
		return upstream{}, err
	}
	var dl struct{ GoMod, Error string }
	if err := json.Unmarshal([]byte(out), &dl); err != nil || dl.GoMod == "" {
		return upstream{}, b.fail("download", fmt.Errorf("unexpected go mod download output %q (%v)", out, err))
	}
	b.begin("staging", "list the staging modules required at v0.0.0")
	edit, err := b.output(ctx, "staging", false, b.o.Go, "mod", "edit", "-json", dl.GoMod)
	if err != nil {
		return upstream{}, err
	}
	up, err := parseUpstream([]byte(edit))
	if err != nil {
		return upstream{}, b.fail("staging", err)
	}
	fmt.Fprintf(b.o.Progress, "kube-build:   %d staging modules: %s\n", len(up.Staging), strings.Join(up.Staging, " "))
	return up, nil
}

func (b *builder) generate(up upstream) error {
	b.begin("generate", "write the build module in "+b.work)
	mod, err := goMod(moduleSpec{Release: b.o.Version, Go: up.Go, Staging: up.Staging})
	if err != nil {
		return b.fail("generate", err)
	}
	fmt.Fprintf(b.log, "=== go.mod\n%s", mod)
	if err := os.WriteFile(filepath.Join(b.work, "go.mod"), []byte(mod), 0o644); err != nil {
		return b.fail("generate", err)
	}
	return nil
}

// compile builds the three commands in one go build (they share most
// packages), printing how many packages have been compiled so far against
// the number the build can involve at most (cached ones are not compiled).
func (b *builder) compile(ctx context.Context, bin string) error {
	b.begin("build", "go build "+strings.Join(Commands, " "))
	args := []string{"build", "-v", "-trimpath", "-ldflags", ldflags(b.o.Version), "-o", bin + "/"}
	list, err := b.output(ctx, "build", true, b.o.Go, append([]string{"list", "-deps", "-trimpath"}, packages()...)...)
	if err != nil {
		return err
	}
	total := len(strings.Fields(list))
	count := newCounter()
	stop := b.ticker(func() string {
		return fmt.Sprintf("%d packages compiled (of at most %d)", count.n.Load(), total)
	})
	err = b.exec(ctx, "build", b.goEnv(true), io.MultiWriter(b.log, count), b.o.Go, append(args, packages()...)...)
	stop()
	return err
}

// verify runs each binary's --version: it must start and report the release.
func (b *builder) verify(ctx context.Context, bin string) error {
	b.begin("verify", "run each binary's --version")
	for _, c := range Commands {
		out, err := b.output(ctx, "verify", false, filepath.Join(bin, c), "--version")
		if err != nil {
			return err
		}
		if !strings.Contains(out, b.o.Version) {
			return b.fail("verify", fmt.Errorf("%s --version printed %q, not %s", c, strings.TrimSpace(out), b.o.Version))
		}
	}
	return nil
}

// install moves the binaries into the release directory and writes the
// stamp last: a crash before it leaves a directory decide refuses.
func (b *builder) install(bin, goVersion string) (Stamp, error) {
	b.begin("install", "install into "+ReleaseDir(b.o.CacheDir, b.o.Version))
	s := Stamp{Version: b.o.Version, GoVersion: goVersion, Built: time.Now().UTC(), SHA256: map[string]string{}}
	var size int64
	for _, c := range Commands {
		p := filepath.Join(bin, c)
		sum, err := fileSHA256(p)
		if err != nil {
			return Stamp{}, b.fail("install", err)
		}
		s.SHA256[c] = sum
		if st, err := os.Stat(p); err == nil {
			size += st.Size()
			fmt.Fprintf(b.o.Progress, "kube-build:   %-24s %4d MB  sha256 %s\n", c, st.Size()>>20, sum[:16])
		}
	}
	dir := ReleaseDir(b.o.CacheDir, b.o.Version)
	if err := os.RemoveAll(dir); err != nil {
		return Stamp{}, b.fail("install", err)
	}
	if err := os.Rename(bin, dir); err != nil {
		return Stamp{}, b.fail("install", err)
	}
	s.BuildTime = time.Since(b.start).Round(time.Second).String()
	if err := writeStamp(dir, s); err != nil {
		return Stamp{}, b.fail("install", err)
	}
	fmt.Fprintf(b.o.Progress, "kube-build:   %d MB in all\n", size>>20)
	return s, nil
}

func (b *builder) begin(step, what string) {
	b.step++
	fmt.Fprintf(b.o.Progress, "kube-build: [%d/%d] %s (%s elapsed)\n", b.step, steps, what, b.elapsed())
	fmt.Fprintf(b.log, "=== step %s: %s\n", step, what)
}

func (b *builder) elapsed() time.Duration { return time.Since(b.start).Round(time.Second) }

func (b *builder) fail(step string, err error) error {
	fmt.Fprintf(b.log, "=== step %s failed: %v\n", step, err)
	return &StepError{Step: step, Log: b.logPath, Err: err}
}

// goEnv pins the toolchain to the installed one (no silent download of
// another Go), ignores any workspace, and builds static binaries as the
// upstream release does. module: the step runs in the build module.
func (b *builder) goEnv(module bool) []string {
	env := append(os.Environ(), "GOTOOLCHAIN=local", "GOWORK=off", "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false")
	if module {
		env = append(env, "GOFLAGS=-mod=mod -buildvcs=false")
	}
	return env
}

// exec runs a command in the build module, its output to w (the log if nil).
func (b *builder) exec(ctx context.Context, step string, env []string, w io.Writer, name string, args ...string) error {
	if w == nil {
		w = b.log
	}
	cmd := exec.CommandContext(ctx, name, args...)
	var last lastLine
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = b.work, env, b.log, io.MultiWriter(w, &last)
	cmd.WaitDelay = 10 * time.Second
	fmt.Fprintf(b.log, "$ %s %s\n", name, strings.Join(args, " "))
	if err := cmd.Run(); err != nil {
		return b.fail(step, fmt.Errorf("%s %s: %w: %s", filepath.Base(name), args[0], err, last.String()))
	}
	return nil
}

// output runs a command in the work directory (module: the build module
// exists there) and returns its stdout; stderr goes to the log.
func (b *builder) output(ctx context.Context, step string, module bool, name string, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	var last lastLine
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = b.work, b.goEnv(module), &out, io.MultiWriter(b.log, &last)
	cmd.WaitDelay = 10 * time.Second
	fmt.Fprintf(b.log, "$ %s %s\n", name, strings.Join(args, " "))
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(b.log, "%s", out.String())
		why := last.String()
		// go mod download -json reports its error in the JSON on stdout.
		var dl struct{ Error string }
		if json.Unmarshal(out.Bytes(), &dl) == nil && dl.Error != "" {
			why = dl.Error
		}
		return "", b.fail(step, fmt.Errorf("%s %s: %w: %s", filepath.Base(name), args[0], err, why))
	}
	return out.String(), nil
}

// ticker prints line() every ProgressEvery until stopped.
func (b *builder) ticker(line func() string) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(b.o.ProgressEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Fprintf(b.o.Progress, "kube-build:   %s, %s elapsed\n", line(), b.elapsed())
			}
		}
	}()
	return func() { close(done); <-finished; fmt.Fprintf(b.o.Progress, "kube-build:   %s\n", line()) }
}

// tail shows the end of the log after a failure.
func (b *builder) tail() {
	data, err := os.ReadFile(b.logPath)
	if err != nil {
		return
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	fmt.Fprintf(b.o.Progress, "kube-build: last lines of %s:\n", b.logPath)
	for _, l := range lines {
		fmt.Fprintf(b.o.Progress, "    %s\n", l)
	}
}

// lineCounter counts the package lines `go build -v` prints (import paths,
// one a line; compiler errors contain spaces and are not counted).
type lineCounter struct {
	n       atomic.Int64
	partial []byte
}

func newCounter() *lineCounter { return &lineCounter{} }

func (c *lineCounter) Write(p []byte) (int, error) {
	c.partial = append(c.partial, p...)
	consumed := 0
	for {
		i := bytes.IndexByte(c.partial[consumed:], '\n')
		if i < 0 {
			break
		}
		line := strings.TrimSpace(string(c.partial[consumed : consumed+i]))
		if line != "" && !strings.ContainsAny(line, " \t:") {
			c.n.Add(1)
		}
		consumed += i + 1
	}
	c.partial = c.partial[consumed:]
	return len(p), nil
}

// lastLine keeps the last non-empty line written to it, for an error
// message (the whole output is in the log).
type lastLine struct {
	buf  []byte
	line string
}

func (l *lastLine) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		if t := strings.TrimSpace(string(l.buf[:i])); t != "" {
			l.line = t
		}
		l.buf = l.buf[i+1:]
	}
	if len(l.buf) > 4096 {
		l.buf = l.buf[len(l.buf)-4096:]
	}
	return len(p), nil
}

func (l *lastLine) String() string {
	if t := strings.TrimSpace(string(l.buf)); t != "" {
		return t
	}
	if l.line == "" {
		return "no output"
	}
	return l.line
}
