package cli

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/metaplane/metaplane/config"
)

// The deploy tests keep deploy/ true of the code: every binary, verb,
// flag, configuration key, environment variable and port the artefacts
// name must exist, so that renaming one breaks a test here rather than a
// deployment. docs/deploy.md describes the artefacts.

// repoRoot is the repository's root, four levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root %s: %v", root, err)
	}
	return root
}

// builtBinaries returns the names make build writes into bin/: one per
// cmd/<name> and cmd/<name>/<helper> main package, and
// metaplane-backend-<name> per plugins/<name>/main.go. It
// fails when the Makefile no longer builds them that way, so that this list
// cannot drift from the build.
func builtBinaries(t *testing.T, root string) map[string]bool {
	t.Helper()
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, rule := range []string{"build -o $(BIN)/ ./cmd/...", "for m in plugins/*/main.go", "$(BIN)/metaplane-backend-$$n ./plugins/$$n"} {
		if !bytes.Contains(mk, []byte(rule)) {
			t.Fatalf("the Makefile's build target no longer has %q: update builtBinaries", rule)
		}
	}
	out := map[string]bool{}
	cmds, _ := filepath.Glob(filepath.Join(root, "cmd", "*", "main.go"))
	helpers, _ := filepath.Glob(filepath.Join(root, "cmd", "*", "*", "main.go"))
	for _, m := range append(cmds, helpers...) {
		out[filepath.Base(filepath.Dir(m))] = true
	}
	plugins, _ := filepath.Glob(filepath.Join(root, "plugins", "*", "main.go"))
	for _, m := range plugins {
		out[config.PluginBinaryPrefix+filepath.Base(filepath.Dir(m))] = true
	}
	if !out["metaplane"] || len(out) < 2 {
		t.Fatalf("built binaries %v: want metaplane and the plugins", out)
	}
	return out
}

// checkCommandLine checks a metaplane command line (without the binary)
// against the cobra command tree: the verb exists, every flag parses, the
// positional arguments are accepted, and every -D key is a configuration
// key. It returns the verb's path ("metaplane coordinator").
func checkCommandLine(t *testing.T, where string, args []string) string {
	t.Helper()
	root := newRoot()
	cmd, rest, err := root.Find(args)
	if err != nil || cmd == root {
		t.Errorf("%s: %q names no metaplane verb: %v", where, args, err)
		return ""
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Errorf("%s: %q: %s: %v", where, args, cmd.CommandPath(), err)
		return cmd.CommandPath()
	}
	if cmd.Args != nil {
		if err := cmd.Args(cmd, cmd.Flags().Args()); err != nil {
			t.Errorf("%s: %q: %s refuses the arguments %q: %v", where, args, cmd.CommandPath(), cmd.Flags().Args(), err)
		}
	}
	for i, a := range args {
		var kv string
		switch {
		case (a == "-D" || a == "--define") && i+1 < len(args):
			kv = args[i+1]
		case strings.HasPrefix(a, "--define="):
			kv = strings.TrimPrefix(a, "--define=")
		case strings.HasPrefix(a, "-D") && len(a) > 2:
			kv = strings.TrimPrefix(a, "-D")
		default:
			continue
		}
		key, _, _ := strings.Cut(kv, "=")
		checkKey(t, where, key)
	}
	return cmd.CommandPath()
}

func checkKey(t *testing.T, where, key string) {
	t.Helper()
	for _, k := range config.Keys() {
		if k == key {
			return
		}
	}
	t.Errorf("%s: %s is not a configuration key", where, key)
}

// checkEnvName checks that a METAPLANE_* variable sets a configuration key
// or is one of the reserved ones (METAPLANE_CONFIG).
func checkEnvName(t *testing.T, where, name string) {
	t.Helper()
	if !strings.HasPrefix(name, config.EnvPrefix) || config.IsReservedEnv(name) {
		return
	}
	key, ok := config.KeyForEnv(name)
	if !ok {
		t.Errorf("%s: %s maps to no configuration key", where, name)
		return
	}
	checkKey(t, where+" "+name, key)
}

// loadConfigText loads a server configuration given as text (with env, a
// list of NAME=value), as the daemon would.
func loadConfigText(t *testing.T, where, text string, env []string, observer bool) *config.Config {
	t.Helper()
	f := filepath.Join(t.TempDir(), "server.yaml")
	if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(config.LoadOptions{File: f, Env: env, Observer: observer})
	if err != nil {
		t.Fatalf("%s: the configuration does not load:\n%v", where, err)
	}
	return cfg
}

func portOf(t *testing.T, where, hostport string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(hostport)
	n, err2 := strconv.Atoi(p)
	if err != nil || err2 != nil {
		t.Fatalf("%s: %q is not host:port", where, hostport)
	}
	return n
}

// configPorts returns the ports a coordinator with cfg listens on, by the
// name deploy/ gives them.
func configPorts(t *testing.T, cfg *config.Config) map[string]int {
	t.Helper()
	ports := map[string]int{"raft": cfg.Coordinator.Raft.Port}
	for _, l := range cfg.BindListeners {
		_, addr, _ := strings.Cut(l, "://")
		ports["client"] = portOf(t, "bind.listeners", addr)
	}
	if cfg.MetricsAddress != "" {
		ports["metrics"] = portOf(t, "metrics.address", cfg.MetricsAddress)
	}
	if cfg.Coordinator.Gossip.Enabled {
		ports["gossip"] = cfg.Coordinator.Gossip.Port
	}
	return ports
}

// servedPaths are the HTTP paths the coordinator registers on its metrics
// listener, read from its source.
func servedPaths(t *testing.T) map[string]bool {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(repoRoot(t), "daemon", "coordinator.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range regexp.MustCompile(`mux\.Handle(?:Func)?\("(/[a-z]*)"`).FindAllStringSubmatch(string(src), -1) {
		out[m[1]] = true
	}
	if !out["/readyz"] || !out["/healthz"] {
		t.Fatalf("daemon/coordinator.go registers %v: want /readyz and /healthz", out)
	}
	return out
}

func TestDeployContainerfile(t *testing.T) {
	root := repoRoot(t)
	built := builtBinaries(t, root)
	f, err := os.Open(filepath.Join(root, "deploy", "Containerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	copied := map[string]bool{}
	stages := map[string]bool{}
	stage := ""
	runs := map[string]string{} // stage -> its RUN lines
	var entrypoint []string
	var exposed []int
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		where := fmt.Sprintf("deploy/Containerfile:%d", n)
		instr, rest, _ := strings.Cut(line, " ")
		fields := strings.Fields(rest)
		switch strings.ToUpper(instr) {
		case "FROM":
			stage = ""
			if len(fields) == 3 && strings.EqualFold(fields[1], "AS") {
				stage = fields[2]
				stages[stage] = true
			}
		case "RUN":
			runs[stage] += rest + "\n"
		case "COPY":
			from := ""
			for len(fields) > 0 && strings.HasPrefix(fields[0], "--") {
				if f, ok := strings.CutPrefix(fields[0], "--from="); ok {
					from = f
				}
				fields = fields[1:]
			}
			if len(fields) < 2 {
				t.Errorf("%s: COPY without a source and a destination", where)
				continue
			}
			for _, src := range fields[:len(fields)-1] {
				if from == "" {
					// From the build context, the repository root.
					if _, err := os.Stat(filepath.Join(root, src)); err != nil {
						t.Errorf("%s: COPY source %s: %v", where, src, err)
					}
					continue
				}
				if !stages[from] {
					t.Errorf("%s: COPY --from=%s names no earlier stage", where, from)
				}
				name := filepath.Base(src)
				if filepath.Base(filepath.Dir(src)) != "bin" && strings.Contains(runs[from], src) {
					continue // made by a RUN of that stage
				}
				if filepath.Base(filepath.Dir(src)) != "bin" || !built[name] {
					t.Errorf("%s: COPY source %s is not a binary make build writes into bin/ (%v)", where, src, keys(built))
				}
				copied[name] = true
			}
		case "ENV":
			name, _, ok := strings.Cut(rest, "=")
			if !ok {
				t.Errorf("%s: ENV without name=value", where)
			}
			checkEnvName(t, where, name)
		case "EXPOSE":
			for _, p := range fields {
				n, err := strconv.Atoi(p)
				if err != nil {
					t.Errorf("%s: EXPOSE %s", where, p)
				}
				exposed = append(exposed, n)
			}
		case "ENTRYPOINT", "CMD":
			var argv []string
			if err := yaml.Unmarshal([]byte(rest), &argv); err != nil {
				t.Errorf("%s: %s is not an exec-form list: %v", where, instr, err)
			}
			if strings.ToUpper(instr) == "ENTRYPOINT" {
				entrypoint = argv
			} else if len(entrypoint) > 0 {
				checkCommandLine(t, where, argv)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for b := range built {
		if !copied[b] && b != HelperLab { // the lab's verbs (bench, demo, conformance) are not for production
			t.Errorf("the image lacks %s, which make build produces", b)
		}
		if copied[b] && b == HelperLab {
			t.Errorf("the image ships %s, which holds the test harnesses", b)
		}
	}
	if len(entrypoint) != 1 || !built[filepath.Base(entrypoint[0])] {
		t.Errorf("ENTRYPOINT %q: want the metaplane binary alone", entrypoint)
	}
	defaults := configPorts(t, loadConfigText(t, "defaults", "", nil, false))
	for _, p := range exposed {
		if !containsPort(defaults, p) {
			t.Errorf("EXPOSE %d is none of the default ports %v", p, defaults)
		}
	}
}

func containsPort(ports map[string]int, p int) bool {
	for _, q := range ports {
		if q == p {
			return true
		}
	}
	return false
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestDeploySystemdUnit(t *testing.T) {
	root := repoRoot(t)
	built := builtBinaries(t, root)
	unit, err := os.ReadFile(filepath.Join(root, "deploy", "systemd", "metaplane-coordinator.service"))
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string][]string{}
	section := ""
	// Keys systemd reads only in [Unit] (it ignores them, with a warning,
	// in [Service]).
	unitOnly := map[string]bool{"Description": true, "Documentation": true, "Wants": true, "After": true, "Requires": true,
		"StartLimitIntervalSec": true, "StartLimitBurst": true}
	for _, line := range strings.Split(string(unit), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "[") {
			section = line
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Errorf("unit line %q is not key=value", line)
			continue
		}
		if unitOnly[k] && section != "[Unit]" {
			t.Errorf("unit: %s= is in %s; systemd reads it only in [Unit]", k, section)
		}
		settings[k] = append(settings[k], v)
	}
	// Where systemd is installed, let it check the unit too (the binary it
	// names need not be installed here).
	if sa, err := exec.LookPath("systemd-analyze"); err == nil {
		out, _ := exec.Command(sa, "verify", filepath.Join(root, "deploy", "systemd", "metaplane-coordinator.service")).CombinedOutput()
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if l != "" && !strings.Contains(l, "is not executable") {
				t.Errorf("systemd-analyze verify: %s", l)
			}
		}
	}
	for _, k := range []string{"User", "StateDirectory", "Restart", "LimitNOFILE", "NoNewPrivileges", "ProtectSystem", "ExecStart"} {
		if len(settings[k]) == 0 {
			t.Errorf("the unit lacks %s=", k)
		}
	}
	if u := settings["User"]; len(u) > 0 && (u[0] == "root" || u[0] == "0") {
		t.Errorf("User=%s: want a dedicated user", u[0])
	}
	argv := strings.Fields(settings["ExecStart"][0])
	if !filepath.IsAbs(argv[0]) || !built[filepath.Base(argv[0])] {
		t.Fatalf("ExecStart runs %s: want an absolute path to a binary make build writes", argv[0])
	}
	if path := checkCommandLine(t, "ExecStart", argv[1:]); path != "metaplane coordinator" {
		t.Errorf("ExecStart runs %q, want metaplane coordinator", path)
	}
	// The configuration it names is deploy/systemd/server.yaml, installed.
	cfgFile := ""
	for i, a := range argv {
		if a == "--config" && i+1 < len(argv) {
			cfgFile = argv[i+1]
		}
	}
	if filepath.Base(cfgFile) != "server.yaml" {
		t.Fatalf("ExecStart --config %q: want the installed deploy/systemd/server.yaml", cfgFile)
	}
	text, err := os.ReadFile(filepath.Join(root, "deploy", "systemd", "server.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := loadConfigText(t, "deploy/systemd/server.yaml", string(text), nil, false)
	// ExecStartPre formats a new member's coordinator.raft.dir and leaves a
	// formatted one alone (bootstrap refuses a non-empty directory).
	if len(settings["ExecStartPre"]) != 1 {
		t.Fatalf("ExecStartPre %q: want one, metaplane raft bootstrap --skip-formatted", settings["ExecStartPre"])
	}
	pre := strings.Fields(settings["ExecStartPre"][0])
	if !filepath.IsAbs(pre[0]) || !built[filepath.Base(pre[0])] {
		t.Fatalf("ExecStartPre runs %s: want an absolute path to a binary make build writes", pre[0])
	}
	if path := checkCommandLine(t, "ExecStartPre", pre[1:]); path != "metaplane raft bootstrap" || !slices.Contains(pre, "--skip-formatted") {
		t.Errorf("ExecStartPre runs %q: want metaplane raft bootstrap ... --skip-formatted", pre)
	}
	for i, a := range pre {
		if a == "--config" && (i+1 >= len(pre) || pre[i+1] != cfgFile) {
			t.Errorf("ExecStartPre --config: want ExecStart's %s", cfgFile)
		}
		if a == "--data-dir" && (i+1 >= len(pre) || pre[i+1] != cfg.Coordinator.Raft.Dir) {
			t.Errorf("ExecStartPre --data-dir: want server.yaml's coordinator.raft.dir %s", cfg.Coordinator.Raft.Dir)
		}
	}
	state := "/var/lib/" + settings["StateDirectory"][0]
	if dir := cfg.Coordinator.Raft.Dir; !strings.HasPrefix(dir, state+"/") {
		t.Errorf("coordinator.raft.dir %s is not under the unit's StateDirectory %s (ProtectSystem=strict makes everything else read-only)", dir, state)
	}
}

// k8sObject is one Kubernetes object of a manifest, as parsed YAML.
type k8sObject struct {
	file string
	kind string
	name string
	body map[string]any
}

func readManifests(t *testing.T, root string) []k8sObject {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(root, "deploy", "kubernetes", "*.yaml"))
	if len(files) == 0 {
		t.Fatal("no manifests under deploy/kubernetes")
	}
	var out []k8sObject
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var doc map[string]any
			err := dec.Decode(&doc)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if doc == nil {
				continue
			}
			o := k8sObject{file: filepath.Base(f), kind: str(doc["kind"]), name: str(get(doc, "metadata", "name")), body: doc}
			if o.kind == "" || o.name == "" || str(doc["apiVersion"]) == "" {
				t.Fatalf("%s: an object without apiVersion, kind or metadata.name", f)
			}
			out = append(out, o)
		}
	}
	return out
}

func get(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func str(v any) string {
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

func list(v any) []any { l, _ := v.([]any); return l }

func find(objs []k8sObject, kind, name string) *k8sObject {
	for i := range objs {
		if objs[i].kind == kind && (name == "" || objs[i].name == name) {
			return &objs[i]
		}
	}
	return nil
}

// matches reports whether a selector (matchLabels or a Service's selector)
// selects pods with labels.
func matches(selector, labels any) bool {
	sel, _ := selector.(map[string]any)
	l, _ := labels.(map[string]any)
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if str(l[k]) != str(v) {
			return false
		}
	}
	return true
}

// podContainer checks one container of a pod template: its binary (the
// image's entrypoint, or command), its command line, its environment and
// its ports, which must be among ports (by name; nil: not checked). It returns the container
// ports by name and the arguments.
func podContainer(t *testing.T, where string, c map[string]any, built map[string]bool, ports map[string]int) (map[string]int, []string) {
	t.Helper()
	var argv []string
	for _, a := range list(c["command"]) {
		argv = append(argv, str(a))
	}
	if len(argv) > 0 && !built[filepath.Base(argv[0])] {
		t.Errorf("%s: command %s is not a binary make build writes", where, argv[0])
	}
	args := argv[min(1, len(argv)):]
	for _, a := range list(c["args"]) {
		args = append(args, str(a))
	}
	checkCommandLine(t, where, args)
	for _, e := range list(c["env"]) {
		checkEnvName(t, where, str(get(e, "name")))
	}
	got := map[string]int{}
	for _, p := range list(c["ports"]) {
		name, n := str(get(p, "name")), get(p, "containerPort")
		num, _ := n.(int)
		got[name] = num
		if want, ok := ports[name]; ports != nil && (!ok || want != num) {
			t.Errorf("%s: container port %s %d: the configuration has %s=%d (%v)", where, name, num, name, want, ports)
		}
	}
	return got, args
}

func TestDeployKubernetes(t *testing.T) {
	root := repoRoot(t)
	built := builtBinaries(t, root)
	objs := readManifests(t, root)
	served := servedPaths(t)

	cm := find(objs, "ConfigMap", "")
	if cm == nil {
		t.Fatal("no ConfigMap with the server configuration")
	}
	serverYAML := str(get(cm.body, "data", "server.yaml"))
	if serverYAML == "" {
		t.Fatalf("ConfigMap %s has no server.yaml", cm.name)
	}

	sts := find(objs, "StatefulSet", "")
	if sts == nil {
		t.Fatal("no coordinator StatefulSet")
	}
	spec := get(sts.body, "spec")
	replicas, _ := get(spec, "replicas").(int)
	if replicas != 3 {
		t.Errorf("StatefulSet %s: %d replicas, want 3", sts.name, replicas)
	}
	if p := str(get(spec, "podManagementPolicy")); p != "Parallel" {
		t.Errorf("StatefulSet podManagementPolicy %q: want Parallel (no pod is ready before a quorum is up)", p)
	}
	podLabels := get(spec, "template", "metadata", "labels")
	if !matches(get(spec, "selector", "matchLabels"), podLabels) {
		t.Errorf("StatefulSet %s: its selector does not select its pods", sts.name)
	}
	svcName := str(get(spec, "serviceName"))
	svc := find(objs, "Service", svcName)
	if svc == nil || str(get(svc.body, "spec", "clusterIP")) != "None" {
		t.Fatalf("StatefulSet serviceName %q: want a headless Service of that name", svcName)
	}
	if get(svc.body, "spec", "publishNotReadyAddresses") != true {
		t.Errorf("Service %s: publishNotReadyAddresses must be true (voters resolve each other before any is ready)", svcName)
	}

	// The init container derives the voter id: run its script for every
	// ordinal, then load each pod's configuration as its coordinator would.
	pod := get(spec, "template", "spec")
	volumes := map[string]any{}
	for _, v := range list(get(pod, "volumes")) {
		volumes[str(get(v, "name"))] = v
	}
	claims := map[string]bool{}
	for _, c := range list(get(spec, "volumeClaimTemplates")) {
		claims[str(get(c, "metadata", "name"))] = true
	}
	inits := list(get(pod, "initContainers"))
	containers := list(get(pod, "containers"))
	if len(inits) != 2 || len(containers) != 1 {
		t.Fatalf("coordinator pod: %d init containers and %d containers, want 2 (the voter id, then raft bootstrap) and 1", len(inits), len(containers))
	}
	// The second init container formats a new member's directory and
	// leaves a formatted one alone.
	boot := inits[1].(map[string]any)
	_, bootArgs := podContainer(t, "raft-bootstrap init container", boot, built, nil)
	if str(boot["image"]) != str(get(containers[0], "image")) {
		t.Errorf("raft-bootstrap init container image %v: want the coordinator's %v", boot["image"], get(containers[0], "image"))
	}
	bootFlag := func(name string) string {
		for i, a := range bootArgs {
			if a == name && i+1 < len(bootArgs) {
				return bootArgs[i+1]
			}
		}
		return ""
	}
	if len(bootArgs) < 2 || bootArgs[0] != "raft" || bootArgs[1] != "bootstrap" || !slices.Contains(bootArgs, "--skip-formatted") {
		t.Fatalf("raft-bootstrap init container args %q: want raft bootstrap ... --skip-formatted (bootstrap refuses a formatted dir: a restarted pod must start)", bootArgs)
	}
	bootMounts := map[string]string{}
	for _, m := range list(boot["volumeMounts"]) {
		bootMounts[str(get(m, "mountPath"))] = str(get(m, "name"))
	}
	c := containers[0].(map[string]any)
	_, args := podContainer(t, "coordinator container", c, built, nil)
	if len(args) == 0 || args[0] != "coordinator" {
		t.Fatalf("coordinator container args %q: want the coordinator verb", args)
	}
	var cfgFile string
	for i, a := range args {
		if a == "--config" && i+1 < len(args) {
			cfgFile = args[i+1]
		}
	}
	mounts := map[string]string{} // mount path -> volume
	for _, m := range list(c["volumeMounts"]) {
		mounts[str(get(m, "mountPath"))] = str(get(m, "name"))
	}
	script := str(list(get(inits[0], "command"))[2])
	tmp := t.TempDir()
	subst := map[string]string{}
	for _, m := range list(get(inits[0], "volumeMounts")) {
		p := str(get(m, "mountPath"))
		local := filepath.Join(tmp, str(get(m, "name")))
		if err := os.MkdirAll(local, 0o755); err != nil {
			t.Fatal(err)
		}
		subst[p] = local
		if v := volumes[str(get(m, "name"))]; str(get(v, "configMap", "name")) == cm.name {
			if err := os.WriteFile(filepath.Join(local, "server.yaml"), []byte(serverYAML), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for p, local := range subst {
		script = strings.ReplaceAll(script, p, local)
	}
	cfgDir := filepath.Dir(cfgFile)
	if subst[cfgDir] == "" || mounts[cfgDir] == "" {
		t.Fatalf("--config %s is not in a volume the init container writes and the coordinator mounts", cfgFile)
	}
	var voters []config.RaftVoter
	var ports map[string]int
	for i := 0; i < replicas; i++ {
		podName := fmt.Sprintf("%s-%d", sts.name, i)
		sh := exec.Command("sh", "-c", script)
		sh.Env = append(os.Environ(), "HOSTNAME="+podName)
		if out, err := sh.CombinedOutput(); err != nil {
			t.Fatalf("init script for %s: %v\n%s", podName, err, out)
		}
		text, err := os.ReadFile(filepath.Join(subst[cfgDir], filepath.Base(cfgFile)))
		if err != nil {
			t.Fatal(err)
		}
		var env []string
		for _, e := range list(c["env"]) {
			name := str(get(e, "name"))
			if strings.HasPrefix(name, config.EnvPrefix) {
				env = append(env, name+"="+strings.ReplaceAll(str(get(e, "value")), "$(POD_NAME)", podName))
			}
		}
		cfg := loadConfigText(t, podName, string(text), env, false)
		voters = cfg.RaftVoters()
		ports = configPorts(t, cfg)
		if len(voters) != replicas {
			t.Fatalf("%s: %d voters, want one per replica (%d)", podName, len(voters), replicas)
		}
		var me *config.RaftVoter
		for j := range voters {
			if voters[j].ID == cfg.RaftNodeID() {
				me = &voters[j]
			}
		}
		if me == nil || me.Host != podName+"."+svcName && !strings.HasPrefix(me.Host, podName+"."+svcName+".") {
			t.Errorf("%s: coordinator.raft.node.id %d is the voter %+v, want this pod's stable name %s.%s", podName, cfg.RaftNodeID(), me, podName, svcName)
		}
		if adv := cfg.AdvertisedListeners; len(adv) != 1 || !strings.Contains(adv[0], "//"+podName+"."+svcName) {
			t.Errorf("%s: advertised.listeners %v: want this pod's stable name", podName, adv)
		}
		// coordinator.raft.dir lies on this pod's PersistentVolumeClaim.
		onClaim := false
		for p, vol := range mounts {
			if claims[vol] && strings.HasPrefix(cfg.Coordinator.Raft.Dir, p+"/") {
				onClaim = true
			}
		}
		if !onClaim {
			t.Errorf("%s: coordinator.raft.dir %s is not on a volumeClaimTemplate mount (%v)", podName, cfg.Coordinator.Raft.Dir, mounts)
		}
		// raft bootstrap formats that directory, on the same claim, with
		// the configuration the init script wrote.
		if d := bootFlag("--data-dir"); d != cfg.Coordinator.Raft.Dir {
			t.Errorf("%s: raft bootstrap --data-dir %q: want coordinator.raft.dir %s", podName, d, cfg.Coordinator.Raft.Dir)
		}
		if f := bootFlag("--config"); f != cfgFile || bootMounts[filepath.Dir(f)] != mounts[filepath.Dir(f)] {
			t.Errorf("%s: raft bootstrap --config %q: want the coordinator's %s on the same volume", podName, f, cfgFile)
		}
		for p, vol := range mounts {
			if claims[vol] && strings.HasPrefix(cfg.Coordinator.Raft.Dir, p+"/") && bootMounts[p] != vol {
				t.Errorf("%s: the raft-bootstrap init container does not mount the claim %s at %s", podName, vol, p)
			}
		}
	}
	cports, _ := podContainer(t, "coordinator container", c, built, ports)
	for _, probe := range []struct{ name, path string }{{"readinessProbe", "/readyz"}, {"livenessProbe", "/healthz"}} {
		p := get(c, probe.name, "httpGet")
		if str(get(p, "path")) != probe.path || !served[probe.path] {
			t.Errorf("%s path %q: want %s, which the coordinator serves", probe.name, get(p, "path"), probe.path)
		}
		if port := str(get(p, "port")); cports[port] != ports["metrics"] {
			t.Errorf("%s port %q: want the metrics.address port %d", probe.name, port, ports["metrics"])
		}
	}
	for _, s := range objs {
		if s.kind != "Service" {
			continue
		}
		if !matches(get(s.body, "spec", "selector"), podLabels) {
			continue
		}
		for _, p := range list(get(s.body, "spec", "ports")) {
			if _, ok := cports[str(get(p, "targetPort"))]; !ok {
				t.Errorf("Service %s: targetPort %v is no coordinator container port", s.name, get(p, "targetPort"))
			}
		}
	}

	pdb := find(objs, "PodDisruptionBudget", "")
	if pdb == nil {
		t.Fatal("no PodDisruptionBudget")
	}
	if !matches(get(pdb.body, "spec", "selector", "matchLabels"), podLabels) {
		t.Errorf("PodDisruptionBudget %s does not select the coordinators", pdb.name)
	}
	if n, _ := get(pdb.body, "spec", "minAvailable").(int); n != len(voters)/2+1 {
		t.Errorf("PodDisruptionBudget minAvailable %v: want a quorum of %d voters, %d", get(pdb.body, "spec", "minAvailable"), len(voters), len(voters)/2+1)
	}

	// The tablet server: same ConfigMap, seeds are the coordinators.
	dep := find(objs, "Deployment", "")
	if dep == nil {
		t.Fatal("no tablet-server Deployment")
	}
	tpod := get(dep.body, "spec", "template", "spec")
	if !matches(get(dep.body, "spec", "selector", "matchLabels"), get(dep.body, "spec", "template", "metadata", "labels")) {
		t.Errorf("Deployment %s: its selector does not select its pods", dep.name)
	}
	tc := list(get(tpod, "containers"))[0].(map[string]any)
	_, targs := podContainer(t, "tablet-server container", tc, built, nil)
	if len(targs) == 0 || targs[0] != "tablet-server" {
		t.Fatalf("tablet-server container args %q: want the tablet-server verb", targs)
	}
	tcfg := loadConfigText(t, "tablet server", serverYAML, nil, true)
	for i, seed := range tcfg.Coordinator.SeedNodes {
		host, port, _ := net.SplitHostPort(seed)
		if !strings.HasPrefix(host, fmt.Sprintf("%s-%d.%s", sts.name, i, svcName)) || port != strconv.Itoa(ports["client"]) {
			t.Errorf("coordinator.seed.nodes[%d] %s: want coordinator %d's stable name and client port %d", i, seed, i, ports["client"])
		}
	}
	listen := map[string]int{}
	for i, a := range targs {
		if a == "--listen" && i+1 < len(targs) {
			listen["tablet"] = portOf(t, "--listen", targs[i+1])
		}
	}
	podContainer(t, "tablet-server container", tc, built, listen)
}
