package bench

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Machine is where and what was measured.
type Machine struct {
	CPUs      int
	Model     string // /proc/cpuinfo "model name"
	Kernel    string
	GoVersion string // `go version`, else the Go the binary was built with
	Commit    string // git rev-parse --short HEAD, "+dirty" when the tree has changes
	Date      time.Time
	BinBytes  int64 // size of the measured binary
	Image     Image // bin/image/oci beside the binary (make image), when ImageErr is nil
	ImageErr  error
}

const modulePath = "github.com/celflow/celflow"

// moduleRoot walks up from dir to the go.mod of celflow ("" when none).
func moduleRoot(dir string) string {
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(bytes.TrimSpace(b), []byte("module "+modulePath)) {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			return ""
		}
		dir = up
	}
}

func readMachine(root, bin string) Machine {
	m := Machine{CPUs: runtime.NumCPU(), Date: time.Now().UTC(), GoVersion: runtime.Version() + " (binary)"}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.Model = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if out, err := exec.Command("go", "version").Output(); err == nil {
		m.GoVersion = strings.TrimPrefix(strings.TrimSpace(string(out)), "go version ")
	}
	if root != "" {
		if out, err := gitOut(root, "rev-parse", "--short=12", "HEAD"); err == nil {
			m.Commit = out
			if st, err := gitOut(root, "status", "--porcelain", "--untracked-files=no"); err == nil && st != "" {
				m.Commit += "+dirty"
			}
		}
	}
	if fi, err := os.Stat(bin); err == nil {
		m.BinBytes = fi.Size()
	}
	m.Image, m.ImageErr = readImage(filepath.Join(filepath.Dir(bin), "image", "oci"))
	return m
}

func gitOut(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	return strings.TrimSpace(string(out)), err
}
