package main

import (
	"archive/tar"
	"debug/elf"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// TestImage checks the layout `make image` wrote (IMAGE_LAYOUT): a single
// image whose config runs a static celflow as a numeric non-root user, with
// the OCI labels, and whose binary, unpacked from the layer, prints the
// version the labels carry.
func TestImage(t *testing.T) {
	dir := os.Getenv("IMAGE_LAYOUT")
	if dir == "" {
		t.Skip("IMAGE_LAYOUT not set: run `make image` and set IMAGE_LAYOUT=$PWD/bin/image/oci")
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("layout holds %d manifests, want 1", len(im.Manifests))
	}
	if im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] == "" {
		t.Error("index entry has no org.opencontainers.image.ref.name (the tag skopeo/crane push)")
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User != "65532:65532" {
		t.Errorf("User = %q, want numeric non-root 65532:65532 (runAsNonRoot needs a number)", c.User)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" {
		t.Errorf("platform %s/%s, want linux/amd64", cf.OS, cf.Architecture)
	}
	if strings.Join(c.Entrypoint, " ") != "/usr/bin/celflow" {
		t.Errorf("Entrypoint = %q, want [/usr/bin/celflow]", c.Entrypoint)
	}
	version := c.Labels["org.opencontainers.image.version"]
	for _, k := range []string{"org.opencontainers.image.version", "org.opencontainers.image.revision",
		"org.opencontainers.image.source", "org.opencontainers.image.created", "org.opencontainers.image.title"} {
		if c.Labels[k] == "" {
			t.Errorf("label %s missing", k)
		}
	}
	if want := os.Getenv("IMAGE_VERSION"); want != "" && version != want {
		t.Errorf("org.opencontainers.image.version = %q, want %q (the Makefile's VERSION)", version, want)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1 (no base image)", len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	bin := filepath.Join(t.TempDir(), "celflow")
	seen := map[string]bool{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		seen[h.Name] = true
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s owned by %d:%d; the image's files are root's (read-only to the user)", h.Name, h.Uid, h.Gid)
		}
		if h.Name == "usr/bin/celflow" {
			f, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
	}
	for _, n := range []string{"usr/bin/celflow", "tmp/", "etc/ssl/certs/ca-certificates.crt", "etc/passwd"} {
		if !seen[n] {
			t.Errorf("layer lacks %s", n)
		}
	}
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, prog := range ef.Progs {
		if prog.Type == elf.PT_INTERP {
			t.Error("usr/bin/celflow has an ELF interpreter: not static (build with CGO_ENABLED=0)")
		}
	}
	ef.Close()
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("celflow version: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), version) {
		t.Errorf("celflow version printed %q, want the label's %q", out, version)
	}
	size := int64(0)
	m, _ := img.Manifest()
	for _, l := range m.Layers {
		size += l.Size
	}
	t.Logf("image %s: %d bytes compressed, version %s", im.Manifests[0].Digest, size+m.Config.Size, version)
}
