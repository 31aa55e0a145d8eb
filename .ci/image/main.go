// Command image writes celflow's OCI image as an OCI image layout, without a
// container daemon or a registry: one layer holding a static bin/celflow on an
// empty base (FROM scratch), a numeric non-root user, and the version the
// Makefile stamped in the OCI annotation labels.
//
//	go run . --binary ../../bin/image/celflow --out ../../bin/image/oci \
//	  --version v1.2.3 --revision <git sha> --source https://github.com/celflow/celflow
//
// Why not ko: ko takes its base image from a registry (remote.Get) or from a
// Docker daemon (ko.local), and neither exists where CI runs; it also builds
// the binary itself, apart from the Makefile's flags. This program uses the
// same library ko does (go-containerregistry) to lay the Makefile's binary on
// empty.Image, so the image has no base to pull at all.
//
// The layer is reproducible for a given binary and CA bundle: fixed owners
// (0:0), modes and timestamps (--created, default the Unix epoch).
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// UID and GID 65532: distroless's "nonroot", the user the chart's
// securityContext runs as.
const nonroot = "65532:65532"

func main() {
	bin := flag.String("binary", "", "static celflow binary to put at /usr/bin/celflow")
	out := flag.String("out", "", "OCI image layout directory to (re)write")
	version := flag.String("version", "dev", "org.opencontainers.image.version")
	revision := flag.String("revision", "", "org.opencontainers.image.revision (git commit)")
	source := flag.String("source", "https://github.com/celflow/celflow", "org.opencontainers.image.source")
	created := flag.Int64("created", 0, "image creation time, Unix seconds (SOURCE_DATE_EPOCH)")
	cas := flag.String("ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "PEM roots for /etc/ssl/certs/ca-certificates.crt (HTTPS upstreams, media, OTLP); empty: none")
	ref := flag.String("tag", "", "org.opencontainers.image.ref.name in the layout's index (default: the version)")
	flag.Parse()
	if *bin == "" || *out == "" {
		log.Fatal("image: --binary and --out are required")
	}
	if *ref == "" {
		*ref = *version
	}
	when := time.Unix(*created, 0).UTC()

	layer, err := buildLayer(*bin, *cas, when)
	if err != nil {
		log.Fatalf("image: %v", err)
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layer)
	if err != nil {
		log.Fatalf("image: %v", err)
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		log.Fatalf("image: %v", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Created = v1.Time{Time: when}
	labels := map[string]string{
		"org.opencontainers.image.title":       "celflow",
		"org.opencontainers.image.description": "celflow: a coordinator for disaggregated LLM inference",
		"org.opencontainers.image.version":     *version,
		"org.opencontainers.image.source":      *source,
		"org.opencontainers.image.url":         *source,
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.created":     when.Format(time.RFC3339),
	}
	if *revision != "" {
		labels["org.opencontainers.image.revision"] = *revision
	}
	cf.Config = v1.Config{
		User:       nonroot,
		Entrypoint: []string{"/usr/bin/celflow"},
		Cmd:        []string{"serve", "--config", "/etc/celflow/config/celflow.yaml"},
		WorkingDir: "/",
		Env:        []string{"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"},
		Labels:     labels,
		ExposedPorts: map[string]struct{}{
			"8080/tcp": {}, "9090/tcp": {},
		},
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		log.Fatalf("image: %v", err)
	}
	img = mutate.Annotations(img, labels).(v1.Image)

	if err := os.RemoveAll(*out); err != nil {
		log.Fatalf("image: %v", err)
	}
	p, err := layout.Write(*out, empty.Index)
	if err != nil {
		log.Fatalf("image: %v", err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": *ref,
	})); err != nil {
		log.Fatalf("image: %v", err)
	}
	d, _ := img.Digest()
	m, _ := img.Manifest()
	var size int64 = m.Config.Size
	for _, l := range m.Layers {
		size += l.Size
	}
	fmt.Printf("%s %s (%d bytes compressed)\n", filepath.Clean(*out), d, size)
}

// buildLayer is the image's one filesystem layer.
func buildLayer(bin, cas string, when time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(name string, mode int64) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, ModTime: when, Format: tar.FormatPAX})
	}
	file := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: when, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	// A read-only root works: celflow writes nothing outside /tmp, which the
	// chart mounts as an emptyDir (1777 here for runtimes that do not).
	for _, d := range []struct {
		name string
		mode int64
	}{{"etc", 0o755}, {"etc/celflow", 0o755}, {"etc/ssl", 0o755}, {"etc/ssl/certs", 0o755}, {"tmp", 0o1777}, {"usr", 0o755}, {"usr/bin", 0o755}} {
		if err := dir(d.name, d.mode); err != nil {
			return nil, err
		}
	}
	// Names for the numeric user, for tools that look them up; celflow does not.
	if err := file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")); err != nil {
		return nil, err
	}
	if err := file("etc/group", 0o644, []byte("root:x:0:\nnonroot:x:65532:\n")); err != nil {
		return nil, err
	}
	if cas != "" {
		c, err := os.ReadFile(cas)
		if err != nil {
			return nil, fmt.Errorf("CA bundle: %w (install Debian's ca-certificates, or pass --ca-bundle '')", err)
		}
		if err := file("etc/ssl/certs/ca-certificates.crt", 0o644, c); err != nil {
			return nil, err
		}
	}
	if err := file("usr/bin/celflow", 0o755, b); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}
