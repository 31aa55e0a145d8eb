package bench

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeLayout writes a one-manifest OCI layout with one gzip layer holding
// files of the given sizes, and returns its dir and the expected Image.
func writeLayout(t *testing.T, sizes ...int) (string, Image) {
	t.Helper()
	dir := t.TempDir()
	put := func(b []byte) ociDesc {
		sum := sha256.Sum256(b)
		h := hex.EncodeToString(sum[:])
		p := filepath.Join(dir, "blobs", "sha256", h)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return ociDesc{Digest: "sha256:" + h, Size: int64(len(b))}
	}
	var layer bytes.Buffer
	zw := gzip.NewWriter(&layer)
	tw := tar.NewWriter(zw)
	var files int64
	_ = tw.WriteHeader(&tar.Header{Name: "usr/", Typeflag: tar.TypeDir, Mode: 0o755})
	for i, n := range sizes {
		_ = tw.WriteHeader(&tar.Header{Name: "usr/f" + string(rune('a'+i)), Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(n)})
		_, _ = tw.Write(bytes.Repeat([]byte{'x'}, n))
		files += int64(n)
	}
	_ = tw.Close()
	_ = zw.Close()
	l := put(layer.Bytes())
	l.MediaType = "application/vnd.oci.image.layer.v1.tar+gzip"
	cfg := put([]byte(`{"architecture":"amd64","os":"linux"}`))
	mb, _ := json.Marshal(map[string]any{"schemaVersion": 2, "config": cfg, "layers": []ociDesc{l}})
	m := put(mb)
	ib, _ := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []ociDesc{m}})
	if err := os.WriteFile(filepath.Join(dir, "index.json"), ib, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, Image{Layers: 1, Compressed: m.Size + cfg.Size + l.Size, Unpacked: files}
}

func TestReadImage(t *testing.T) {
	dir, want := writeLayout(t, 1000, 0, 70000)
	got, err := readImage(dir)
	if err != nil || got != want {
		t.Fatalf("readImage = %+v, %v; want %+v", got, err, want)
	}
	if c := imageCheck(got, nil); !strings.Contains(c.Measured, "1 layer(s)") || c.Verdict != "–" {
		t.Fatalf("check %+v", c)
	}

	// A layout that does not hold what its index names is an error, not a size.
	_ = os.RemoveAll(filepath.Join(dir, "blobs"))
	if _, err := readImage(dir); err == nil {
		t.Fatal("missing blobs: no error")
	}
	_, err = readImage(filepath.Join(t.TempDir(), "none"))
	if c := imageCheck(Image{}, err); c.Verdict != notMeasure || !strings.Contains(c.Measured, "make image") {
		t.Fatalf("absent layout: %+v", c)
	}
	bad := t.TempDir()
	_ = os.WriteFile(filepath.Join(bad, "index.json"), []byte(`{"manifests":[{"digest":"sha256:../../etc"}]}`), 0o644)
	if _, err := readImage(bad); err == nil || !strings.Contains(err.Error(), "bad digest") {
		t.Fatalf("path in digest: %v", err)
	}
}
