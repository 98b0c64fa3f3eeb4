// Package journaltest gives tests a real PostgreSQL database with the
// journal's schema: a fresh database per test, cloned from a template that
// is migrated once.
//
// The server is TEST_DATABASE_URL when set (a postgres:// URL of a role
// that may create databases); otherwise a private cluster that the test
// binary starts in a temporary directory on first use (initdb as the
// postgres user when running as root) and that Main stops. Tests that stop
// PostgreSQL on purpose start their own cluster with NewServer, so they
// never disturb the shared one.
package journaltest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/jackc/pgx/v5"

	"github.com/policyd/policyd/internal/journal"
	"github.com/policyd/policyd/migrations"
)

// Server is a PostgreSQL server that tests create databases on: either an
// external one (TEST_DATABASE_URL) or a private cluster in a temporary
// directory.
type Server struct {
	adminURL *url.URL // a URL of the server's "postgres" database (or TEST_DATABASE_URL's)

	// A private cluster only:
	dir, dataDir, binDir string
	port                 int
	asPostgres           bool

	templateOnce sync.Once
	template     string
	templateErr  error
}

var shared struct {
	once sync.Once
	srv  *Server
	err  error
}

// DatabaseURL returns the URL of a fresh database for t, with the journal's
// schema, dropped when t ends. It uses TEST_DATABASE_URL when set, else the
// test binary's private cluster (started on first use; call Main from
// TestMain to stop it afterwards). Under -short it skips t: the quick run
// needs no PostgreSQL.
func DatabaseURL(t testing.TB) string {
	t.Helper()
	skipShort(t)
	return sharedServer(t).DatabaseURL(t)
}

// skipShort skips t under -short: every database test goes through here.
func skipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs PostgreSQL (skipped under -short)")
	}
}

// sharedServer is the test binary's server, started on first use.
func sharedServer(t testing.TB) *Server {
	t.Helper()
	shared.once.Do(func() {
		if raw := os.Getenv("TEST_DATABASE_URL"); raw != "" {
			u, err := url.Parse(raw)
			if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
				shared.err = fmt.Errorf("TEST_DATABASE_URL must be a postgres:// URL, got %q", raw)
				return
			}
			shared.srv = &Server{adminURL: u}
			return
		}
		shared.srv, shared.err = startCluster()
	})
	if shared.err != nil {
		t.Fatalf("journaltest: no PostgreSQL for the tests: %v", shared.err)
	}
	return shared.srv
}

// Main runs the tests and then stops and removes the private cluster, if
// one was started. Use it as TestMain:
//
//	func TestMain(m *testing.M) { journaltest.Main(m) }
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run is Main for a TestMain with more to clean up: it runs the tests,
// stops the private cluster and returns the exit code.
//
// After passing tests it fails the run if any goroutine the tests started
// is still running (goleak): the journal's writers and health loop, the
// gRPC servers and HTTP servers the tests start must all stop.
func Run(m *testing.M) int {
	before := goleak.IgnoreCurrent()
	code := m.Run()
	if shared.srv != nil && shared.srv.dir != "" {
		if err := shared.srv.shutdown(); err != nil {
			fmt.Fprintln(os.Stderr, "journaltest:", err)
		}
	}
	if code == 0 {
		if err := goleak.Find(before); err != nil {
			fmt.Fprintln(os.Stderr, "journaltest: goroutines left running after the tests:", err)
			code = 1
		}
	}
	return code
}

// NewServer starts a private cluster for t alone, stopped and removed when
// t ends, for tests that stop and start PostgreSQL (Stop, Start) and so
// must not share a server. Under -short it skips t.
func NewServer(t testing.TB) *Server {
	t.Helper()
	skipShort(t)
	s, err := startCluster()
	if err != nil {
		t.Fatalf("journaltest: start PostgreSQL: %v", err)
	}
	t.Cleanup(func() {
		if err := s.shutdown(); err != nil {
			t.Errorf("journaltest: %v", err)
		}
	})
	return s
}

// EmptyDatabaseURL is DatabaseURL without the schema: a fresh, empty
// database for t, for tests of the migrations themselves.
func EmptyDatabaseURL(t testing.TB) string {
	t.Helper()
	return sharedServer(t).EmptyDatabaseURL(t)
}

// DatabaseURL returns the URL of a fresh database on s for t, with the
// journal's schema, dropped when t ends.
func (s *Server) DatabaseURL(t testing.TB) string {
	t.Helper()
	s.templateOnce.Do(func() { s.template, s.templateErr = s.makeTemplate(context.Background()) })
	if s.templateErr != nil {
		t.Fatalf("journaltest: template database: %v", s.templateErr)
	}
	return s.newDatabase(t, s.template)
}

// EmptyDatabaseURL returns the URL of a fresh, empty database on s for t,
// dropped when t ends.
func (s *Server) EmptyDatabaseURL(t testing.TB) string {
	t.Helper()
	return s.newDatabase(t, "template0")
}

func (s *Server) newDatabase(t testing.TB, template string) string {
	t.Helper()
	ctx := context.Background()
	name := "policyd_test_" + randomHex(8)
	if err := s.exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE "+pgx.Identifier{template}.Sanitize()); err != nil {
		t.Fatalf("journaltest: create database: %v", err)
	}
	t.Cleanup(func() {
		if err := s.exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("journaltest: drop database %s: %v", name, err)
		}
	})
	return s.url(name)
}

// Stop stops a private cluster (pg_ctl stop -m fast: connections are cut at
// once), as if the database went down.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	if s.dir == "" {
		t.Fatal("journaltest: Stop needs a private cluster (NewServer)")
	}
	if out, err := s.pgCtl("-m", "fast", "-w", "stop"); err != nil {
		t.Fatalf("journaltest: pg_ctl stop: %v\n%s", err, out)
	}
}

// Start starts a private cluster stopped by Stop again, on the same port.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	if s.dir == "" {
		t.Fatal("journaltest: Start needs a private cluster (NewServer)")
	}
	if err := s.start(); err != nil {
		t.Fatalf("journaltest: %v", err)
	}
}

// url is the URL of database name on s.
func (s *Server) url(name string) string {
	u := *s.adminURL
	u.Path = "/" + name
	u.RawPath = ""
	return u.String()
}

func (s *Server) exec(ctx context.Context, sql string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.adminURL.String())
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(ctx) }()
	_, err = conn.Exec(ctx, sql)
	return err
}

// makeTemplate makes sure the template database for the current
// migrations exists and returns its name. The name carries a hash of the
// migrations, so a server shared by several test binaries (or several
// checkouts) never clones a stale schema; an advisory lock makes binaries
// that start together build it once.
func (s *Server) makeTemplate(ctx context.Context) (string, error) {
	sum, err := migrationsHash()
	if err != nil {
		return "", err
	}
	name := "policyd_template_" + sum
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.adminURL.String())
	if err != nil {
		return "", err
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(hashtext('policyd_template'))"); err != nil {
		return "", err
	}
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		return name, nil
	}
	// Build under another name and rename when done, so that a binary that
	// died half-way never leaves a half-migrated template behind.
	building := name + "_" + randomHex(4)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{building}.Sanitize()); err != nil {
		return "", err
	}
	if err := journal.Migrate(ctx, s.url(building)); err != nil {
		return "", fmt.Errorf("migrate %s: %w", building, err)
	}
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{building}.Sanitize()+" RENAME TO "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", err
	}
	return name, nil
}

// migrationsHash is a short hash of every migration file.
func migrationsHash() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(migrations.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.FS, path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %d\n", path, len(b))
		h.Write(b)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))[:12], err
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// startCluster initialises and starts a private cluster in a new temporary
// directory, listening on a free loopback port and on a unix socket inside
// the directory.
func startCluster() (*Server, error) {
	binDir, err := findBinDir()
	if err != nil {
		return nil, err
	}
	sweepOnce.Do(func() { sweepStale(binDir) })
	dir, err := os.MkdirTemp("", clusterPrefix)
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, dataDir: filepath.Join(dir, "data"), binDir: binDir, asPostgres: os.Geteuid() == 0}
	fail := func(err error) (*Server, error) {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return fail(err)
	}
	// The server's user must be able to enter the directory: MkdirTemp
	// makes it 0700, and as root it belongs to root.
	if err := os.Chmod(dir, 0o755); err != nil {
		return fail(err)
	}
	if s.asPostgres {
		uid, gid, err := lookupUser("postgres")
		if err != nil {
			return fail(fmt.Errorf("running as root, initdb needs the postgres user: %w", err))
		}
		if err := os.Chown(dir, uid, gid); err != nil {
			return fail(err)
		}
	}
	// trust: only this machine's loopback and the private socket reach it.
	// --no-sync: a throwaway cluster need not survive a power cut.
	if out, err := s.command("initdb", "-D", s.dataDir, "-U", "postgres", "-A", "trust", "-E", "UTF8",
		"--locale=C", "--no-sync").CombinedOutput(); err != nil {
		return fail(fmt.Errorf("initdb: %v\n%s", err, out))
	}
	for try := 0; ; try++ {
		if s.port, err = freePort(); err != nil {
			return fail(err)
		}
		if err = s.start(); err == nil {
			break
		}
		if try == 2 {
			return fail(err)
		}
	}
	s.adminURL = &url.URL{Scheme: "postgres", User: url.User("postgres"), Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)),
		Path: "/postgres", RawQuery: "sslmode=disable"}
	return s, nil
}

// Private clusters live in os.TempDir()/policyd-pg-*, each with a file
// naming the process (the test binary) that owns it.
const (
	clusterPrefix = "policyd-pg-"
	ownerFile     = "owner.pid"
)

var sweepOnce sync.Once

// sweepStale stops and removes the clusters of test binaries that died
// without stopping them (killed, crashed, or without Main in TestMain), so
// that leftovers last only until the next test run.
func sweepStale(binDir string) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), clusterPrefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			// No owner yet: a cluster being made right now, unless old.
			if fi, statErr := os.Stat(dir); statErr != nil || time.Since(fi.ModTime()) < time.Hour {
				continue
			}
		} else if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && processAlive(pid) {
			continue
		}
		s := &Server{dir: dir, dataDir: filepath.Join(dir, "data"), binDir: binDir, asPostgres: os.Geteuid() == 0}
		_, _ = s.pgCtl("-m", "immediate", "-w", "stop") // may not run at all
		_ = os.RemoveAll(dir)
	}
}

// processAlive reports whether process pid exists.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

func (s *Server) start() error {
	opts := fmt.Sprintf("-p %d -k '%s' -c listen_addresses=127.0.0.1 -c max_connections=300", s.port, s.dir)
	out, err := s.pgCtl("-l", filepath.Join(s.dir, "postgres.log"), "-o", opts, "-w", "-t", "60", "start")
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
		return fmt.Errorf("pg_ctl start on port %d: %v\n%s\n%s", s.port, err, out, log)
	}
	return nil
}

// shutdown stops the cluster, if it runs, and removes its directory.
func (s *Server) shutdown() error {
	var err error
	if _, statusErr := s.pgCtl("status"); statusErr == nil {
		if out, stopErr := s.pgCtl("-m", "fast", "-w", "stop"); stopErr != nil {
			err = fmt.Errorf("pg_ctl stop: %v\n%s", stopErr, out)
		}
	}
	return errors.Join(err, os.RemoveAll(s.dir))
}

func (s *Server) pgCtl(args ...string) ([]byte, error) {
	return s.command("pg_ctl", append([]string{"-D", s.dataDir}, args...)...).CombinedOutput()
}

// command runs a PostgreSQL program, as the postgres user when we are root
// (initdb and postgres refuse to run as root).
func (s *Server) command(program string, args ...string) *exec.Cmd {
	bin := filepath.Join(s.binDir, program)
	var cmd *exec.Cmd
	if s.asPostgres {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", bin}, args...)...)
	} else {
		cmd = exec.Command(bin, args...)
	}
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	return cmd
}

// findBinDir finds PostgreSQL's programs: next to initdb on PATH, else the
// newest /usr/lib/postgresql/*/bin (Debian's layout).
func findBinDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "pg_ctl")); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return versionOf(b) - versionOf(a) })
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	return "", errors.New("PostgreSQL is not installed (no initdb on PATH or in /usr/lib/postgresql/*/bin): " +
		"run scripts/pg.sh start, apt-get install postgresql, or set TEST_DATABASE_URL")
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(strings.Split(filepath.Base(filepath.Dir(binDir)), ".")[0])
	return v
}

func lookupUser(name string) (uid, gid int, err error) {
	u, err := user.Lookup(name)
	if err != nil {
		return 0, 0, err
	}
	if uid, err = strconv.Atoi(u.Uid); err != nil {
		return 0, 0, err
	}
	gid, err = strconv.Atoi(u.Gid)
	return uid, gid, err
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}
