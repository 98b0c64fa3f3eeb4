package main

import (
	"bytes"
	"context"
	"debug/elf"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// The container files can't be built here (there is no Docker), so these
// tests check what can be checked without it: the Dockerfile's build
// command, run as written, gives a static binary; its final stage runs that
// binary as a non-root user; docker-compose.yml wires policyd to a healthy
// PostgreSQL. The image itself is not built (docs/operations.md says so).

// dockerInstruction is one instruction of a Dockerfile.
type dockerInstruction struct {
	cmd  string // upper case: FROM, RUN, COPY, USER, ...
	args string
}

// parseDockerfile reads the instructions of a Dockerfile, joining
// continuation lines and dropping comments, split into stages (each starts
// with its FROM).
func parseDockerfile(t *testing.T, path string) [][]dockerInstruction {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var (
		stages  [][]dockerInstruction
		pending string
	)
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		if pending == "" && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			pending += cont + " "
			continue
		}
		line, pending = pending+line, ""
		cmd, args, _ := strings.Cut(line, " ")
		in := dockerInstruction{strings.ToUpper(cmd), strings.TrimSpace(args)}
		if in.cmd == "FROM" {
			stages = append(stages, nil)
		}
		if len(stages) == 0 {
			t.Fatalf("%s: %s before the first FROM", path, in.cmd)
		}
		stages[len(stages)-1] = append(stages[len(stages)-1], in)
	}
	return stages
}

// find returns the args of the stage's instructions named cmd, in order.
func find(stage []dockerInstruction, cmd string) []string {
	var out []string
	for _, in := range stage {
		if in.cmd == cmd {
			out = append(out, in.args)
		}
	}
	return out
}

// The Dockerfile's build stage builds ./cmd/policyd with CGO_ENABLED=0;
// running that command as written gives a static ELF binary (no
// interpreter, no dynamic section), which a distroless static or scratch
// base can run; the final stage copies it, runs it as a non-root user, and
// serves on the port it exposes.
func TestDockerfileStaticNonRoot(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("skipping the container build check in short mode")
	}
	stages := parseDockerfile(t, "../../Dockerfile")
	if len(stages) < 2 {
		t.Fatalf("Dockerfile has %d stage(s), want a multi-stage build (build, then a small final image)", len(stages))
	}
	build, final := stages[0], stages[len(stages)-1]
	buildName := ""
	if from := strings.Fields(find(build, "FROM")[0]); len(from) == 3 && strings.EqualFold(from[1], "AS") {
		buildName = from[2]
	}

	var buildCmd string
	for _, run := range find(build, "RUN") {
		if strings.Contains(run, "go build") && strings.Contains(run, "./cmd/policyd") {
			buildCmd = run
		}
	}
	if buildCmd == "" {
		t.Fatal("no RUN ... go build ... ./cmd/policyd in the Dockerfile's first stage")
	}
	if !strings.Contains(buildCmd, "CGO_ENABLED=0") {
		t.Errorf("the build command %q does not set CGO_ENABLED=0", buildCmd)
	}
	fields := strings.Fields(buildCmd)
	out := ""
	for i, f := range fields[:len(fields)-1] {
		if f == "-o" {
			out = fields[i+1]
		}
	}
	if out == "" {
		t.Fatalf("the build command %q names no -o output", buildCmd)
	}

	// Run the build command as the Dockerfile writes it, with the output in
	// a temporary directory instead of /out.
	bin := filepath.Join(t.TempDir(), "policyd")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", strings.Replace(buildCmd, "-o "+out, "-o "+bin, 1))
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "VERSION=container-test")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the Dockerfile's build command: %v\n%s", err, b)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the binary has a %v program header: it is dynamically linked", p.Type)
		}
	}
	if s := f.Section(".dynamic"); s != nil {
		t.Error("the binary has a .dynamic section: it is dynamically linked")
	}
	if v, err := exec.CommandContext(ctx, bin, "version").Output(); err != nil || !bytes.HasPrefix(v, []byte("policyd container-test ")) {
		t.Errorf("the built binary's version: %q, %v; want policyd container-test (the VERSION build arg)", v, err)
	}

	// The final stage: the binary from the build stage, as a non-root user.
	var dest string
	for _, cp := range find(final, "COPY") {
		if f := strings.Fields(cp); len(f) == 3 && f[0] == "--from="+buildName && f[1] == out {
			dest = f[2]
		}
	}
	if dest == "" {
		t.Errorf("the final stage does not COPY --from=%s %s", buildName, out)
	}
	users := find(final, "USER")
	if len(users) == 0 {
		t.Error("the final stage sets no USER: it would run as root")
	} else if u, _, _ := strings.Cut(users[len(users)-1], ":"); u == "root" || u == "0" {
		t.Errorf("the final stage runs as USER %s", users[len(users)-1])
	}
	if ep := find(final, "ENTRYPOINT"); len(ep) != 1 || !strings.Contains(ep[0], `"`+dest+`"`) {
		t.Errorf("ENTRYPOINT %v, want the copied binary %s", ep, dest)
	}
	expose, cmds := find(final, "EXPOSE"), find(final, "CMD")
	if len(expose) != 1 || len(cmds) != 1 || !strings.Contains(cmds[0], `"0.0.0.0:`+expose[0]+`"`) {
		t.Errorf("EXPOSE %v and CMD %v: want CMD to serve on 0.0.0.0 at the exposed port", expose, cmds)
	}
}

// composeFile is the part of docker-compose.yml the test checks.
type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image       string            `yaml:"image"`
	Build       string            `yaml:"build"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	Volumes     []string          `yaml:"volumes"`
	Healthcheck struct {
		Test     []string `yaml:"test"`
		Interval string   `yaml:"interval"`
	} `yaml:"healthcheck"`
	DependsOn map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
}

// docker-compose.yml: PostgreSQL with a pg_isready healthcheck and a named
// volume; policyd built from the Dockerfile, started once PostgreSQL is
// healthy, with a DATABASE_URL that reaches that service with its
// credentials and database.
func TestComposeFileShape(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	pg, ok := c.Services["postgres"]
	if !ok {
		t.Fatalf("docker-compose.yml has no postgres service: %v", c.Services)
	}
	pd, ok := c.Services["policyd"]
	if !ok {
		t.Fatalf("docker-compose.yml has no policyd service: %v", c.Services)
	}
	if !strings.HasPrefix(pg.Image, "postgres:") {
		t.Errorf("postgres image %q, want postgres:<version>", pg.Image)
	}
	if hc := strings.Join(pg.Healthcheck.Test, " "); !strings.Contains(hc, "pg_isready") || pg.Healthcheck.Interval == "" {
		t.Errorf("postgres healthcheck %q every %q, want pg_isready at an interval", hc, pg.Healthcheck.Interval)
	}
	if len(pg.Volumes) == 0 {
		t.Error("postgres has no volume: the journal would go with the container")
	} else if vol, _, _ := strings.Cut(pg.Volumes[0], ":"); c.Volumes == nil || !hasKey(c.Volumes, vol) {
		t.Errorf("postgres volume %q is not a named volume of the file (%v)", pg.Volumes[0], c.Volumes)
	}

	if pd.Build != "." {
		t.Errorf("policyd build %q, want . (the Dockerfile)", pd.Build)
	}
	if got := pd.DependsOn["postgres"].Condition; got != "service_healthy" {
		t.Errorf("policyd depends_on postgres condition %q, want service_healthy", got)
	}
	u, err := url.Parse(pd.Environment["DATABASE_URL"])
	if err != nil || u.Scheme != "postgres" {
		t.Fatalf("policyd DATABASE_URL %q: %v; want a postgres:// URL", pd.Environment["DATABASE_URL"], err)
	}
	pass, _ := u.User.Password()
	if u.Hostname() != "postgres" || u.Port() != "5432" || u.User.Username() != pg.Environment["POSTGRES_USER"] ||
		pass != pg.Environment["POSTGRES_PASSWORD"] || strings.TrimPrefix(u.Path, "/") != pg.Environment["POSTGRES_DB"] {
		t.Errorf("policyd DATABASE_URL %s does not reach the postgres service as its POSTGRES_USER, POSTGRES_PASSWORD and POSTGRES_DB (%v)",
			u.Redacted(), pg.Environment)
	}
	if len(pd.Ports) != 1 || !strings.HasSuffix(pd.Ports[0], ":7433") {
		t.Errorf("policyd ports %v, want the container's 7433 published", pd.Ports)
	}
}

func hasKey(m map[string]any, k string) bool {
	_, ok := m[k]
	return ok
}
