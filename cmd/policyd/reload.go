package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/policyd/policyd/internal/policy"
)

// reloadDebounce is how long the policy file must be quiet before a change
// is reloaded: an editor's save is several events (write, rename, chmod).
const reloadDebounce = 100 * time.Millisecond

// reloader reloads the policy on SIGHUP and when the policy file changes.
// A good new policy replaces the one in force through set; a bad one is
// logged and the one in force stays.
type reloader struct {
	path   string // the policy file; "" for none (SIGHUP reloads the caps only)
	env    func(string) string
	set    func(*policy.Policy)
	logger *slog.Logger

	hup     chan os.Signal
	watcher *fsnotify.Watcher // nil without a file
	onHUP   []func()          // also run on SIGHUP, e.g. reloading the tokens file
}

// onSIGHUP adds f to what SIGHUP does besides reloading the policy; call it
// before run.
func (r *reloader) onSIGHUP(f func()) { r.onHUP = append(r.onHUP, f) }

// newReloader starts listening for SIGHUP and, with a policy file, watching
// the file's directory (so that editors that save by renaming a new file
// over the old one are seen too). Call run to act on them and close to stop.
func newReloader(path string, env func(string) string, set func(*policy.Policy), logger *slog.Logger) (*reloader, error) {
	r := &reloader{path: path, env: env, set: set, logger: logger, hup: make(chan os.Signal, 1)}
	if path != "" {
		w, err := fsnotify.NewWatcher()
		if err != nil {
			return nil, fmt.Errorf("watch policy file: %w", err)
		}
		if err := w.Add(filepath.Dir(path)); err != nil {
			_ = w.Close()
			return nil, fmt.Errorf("watch policy file %s: %w", path, err)
		}
		r.watcher = w
	}
	signal.Notify(r.hup, syscall.SIGHUP)
	return r, nil
}

// close stops listening and watching.
func (r *reloader) close() {
	signal.Stop(r.hup)
	if r.watcher != nil {
		_ = r.watcher.Close()
	}
}

// run reloads on each SIGHUP and, reloadDebounce after the last change to
// the policy file, on file changes, until ctx is done.
func (r *reloader) run(ctx context.Context) {
	var events <-chan fsnotify.Event
	var errs <-chan error
	if r.watcher != nil {
		events, errs = r.watcher.Events, r.watcher.Errors
	}
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.hup:
			r.reload("SIGHUP")
			for _, f := range r.onHUP {
				f()
			}
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if r.affects(ev) {
				debounce.Reset(reloadDebounce)
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			r.logger.Warn("watching the policy file", "path", r.path, "error", err)
		case <-debounce.C:
			r.reload("file changed")
		}
	}
}

// affects reports whether ev, an event in the file's directory, may have
// changed the policy file: any event but a permission change on the file
// itself, or on "..data", the symlink a Kubernetes ConfigMap volume swaps.
func (r *reloader) affects(ev fsnotify.Event) bool {
	if ev.Op == fsnotify.Chmod {
		return false
	}
	name := filepath.Base(ev.Name)
	return name == filepath.Base(r.path) || name == "..data"
}

// reload loads the policy afresh and puts it in force, or logs why not.
func (r *reloader) reload(trigger string) {
	p, err := policy.Load(r.path, r.env)
	if err != nil {
		r.logger.Error("policy reload failed; keeping the policy in force", "trigger", trigger, "error", err)
		return
	}
	r.set(p)
	r.logger.Info("policy reloaded", "trigger", trigger, "source", p.Source, "profiles", len(p.Profiles))
}
