package bench

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Image is what `make image` wrote: an OCI image layout (bin/image/oci).
type Image struct {
	Layers     int
	Compressed int64 // manifest, config and layer blobs: what a registry stores and a node pulls
	Unpacked   int64 // regular files in the layers: what the node's disk holds
}

// ociDesc is an OCI content descriptor (image-spec descriptor.md).
type ociDesc struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
}

// readImage measures the single-manifest OCI layout at dir. Every blob is
// opened by the digest the index and the manifest name, so a layout that
// does not hold what it says is an error, not a number.
func readImage(dir string) (Image, error) {
	var idx struct {
		Manifests []ociDesc `json:"manifests"`
	}
	if err := readJSON(filepath.Join(dir, "index.json"), &idx); err != nil {
		return Image{}, err
	}
	if len(idx.Manifests) != 1 {
		return Image{}, fmt.Errorf("%s: index.json lists %d manifests, want 1", dir, len(idx.Manifests))
	}
	var man struct {
		Config ociDesc   `json:"config"`
		Layers []ociDesc `json:"layers"`
	}
	mp, err := blobPath(dir, idx.Manifests[0].Digest)
	if err != nil {
		return Image{}, err
	}
	if err := readJSON(mp, &man); err != nil {
		return Image{}, err
	}
	img := Image{Layers: len(man.Layers), Compressed: idx.Manifests[0].Size + man.Config.Size}
	for _, l := range man.Layers {
		img.Compressed += l.Size
		n, err := layerFiles(dir, l)
		if err != nil {
			return Image{}, err
		}
		img.Unpacked += n
	}
	return img, nil
}

func blobPath(dir, digest string) (string, error) {
	alg, hex, ok := strings.Cut(digest, ":")
	if !ok || alg == "" || hex == "" || strings.ContainsAny(digest, "/\\") {
		return "", fmt.Errorf("%s: bad digest %q", dir, digest)
	}
	return filepath.Join(dir, "blobs", alg, hex), nil
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// layerFiles sums the sizes of the regular files in one layer (gzip or plain tar).
func layerFiles(dir string, l ociDesc) (int64, error) {
	p, err := blobPath(dir, l.Digest)
	if err != nil {
		return 0, err
	}
	f, err := os.Open(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(l.MediaType, "gzip") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", p, err)
		}
		defer zr.Close()
		r = zr
	}
	tr := tar.NewReader(r)
	var n int64
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return 0, fmt.Errorf("%s: %w", p, err)
		}
		if h.Typeflag == tar.TypeReg {
			n += h.Size
		}
	}
}

// imageCheck is the report's row for the image: a size, not a target.
func imageCheck(img Image, err error) Check {
	c := Check{Target: "OCI image (`make image`), pulled and unpacked size", Source: "issue 21", Verdict: "–"}
	switch {
	case errors.Is(err, os.ErrNotExist):
		c.Measured, c.Verdict = "bin/image/oci absent: run `make image`", notMeasure
	case err != nil:
		c.Measured, c.Verdict = err.Error(), notMeasure
	case img.Layers == 0:
		c.Measured, c.Verdict = "no image read", notMeasure
	default:
		c.Measured = fmt.Sprintf("%.1f MiB compressed (%d bytes of manifest, config and %d layer(s)), %.1f MiB unpacked",
			float64(img.Compressed)/(1<<20), img.Compressed, img.Layers, float64(img.Unpacked)/(1<<20))
	}
	return c
}
