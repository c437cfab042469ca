package framework

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"time"
)

// ImageConfig is the part of an OCI image config's "config" that WriteImageTarConfig sets: the
// process a container of the image runs when its spec gives no command (Entrypoint, then Cmd), and the
// user it runs as ("uid:gid"; empty: root).
type ImageConfig struct {
	Entrypoint, Cmd []string
	User            string
}

// WriteImageTar writes an OCI image layout tarball to path holding one image named ref (e.g.
// "example.com/app:v1") whose single uncompressed layer has files (path in the image -> content, mode
// 0755), for Containerd.ImportImage: no registry is reachable here. Errors name the write that failed.
// Its config names no process: WriteImageTarConfig writes an image containers can run.
func WriteImageTar(path, ref string, files map[string][]byte) error {
	return WriteImageTarConfig(path, ref, files, ImageConfig{})
}

// WriteImageTarConfig is WriteImageTar with the image config's Entrypoint and Cmd from cfg.
func WriteImageTarConfig(path, ref string, files map[string][]byte, cfg ImageConfig) error {
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		hdr := &tar.Header{Name: strings.TrimPrefix(n, "/"), Mode: 0o755, Size: int64(len(files[n])), ModTime: time.Unix(0, 0)}
		if err := lw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("write image layer: %w", err)
		}
		if _, err := lw.Write(files[n]); err != nil {
			return fmt.Errorf("write image layer: %w", err)
		}
	}
	if err := lw.Close(); err != nil {
		return fmt.Errorf("write image layer: %w", err)
	}

	blobs := map[string][]byte{}
	desc := func(mediaType string, b []byte) map[string]any {
		d := fmt.Sprintf("sha256:%x", sha256.Sum256(b))
		blobs[d] = b
		return map[string]any{"mediaType": mediaType, "digest": d, "size": len(b)}
	}
	layerDesc := desc("application/vnd.oci.image.layer.v1.tar", layer.Bytes())
	process := map[string]any{}
	if len(cfg.Entrypoint) > 0 {
		process["Entrypoint"] = cfg.Entrypoint
	}
	if len(cfg.Cmd) > 0 {
		process["Cmd"] = cfg.Cmd
	}
	if cfg.User != "" {
		process["User"] = cfg.User
	}
	config, _ := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH, "os": "linux", "config": process,
		"rootfs": map[string]any{"type": "layers", "diff_ids": []any{layerDesc["digest"]}},
	})
	manifest, _ := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": desc("application/vnd.oci.image.config.v1+json", config), "layers": []any{layerDesc},
	})
	mdesc := desc("application/vnd.oci.image.manifest.v1+json", manifest)
	tag := ref[strings.LastIndex(ref, ":")+1:]
	mdesc["annotations"] = map[string]string{"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": tag}
	index, _ := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []any{mdesc}})

	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write image tar: %w", err)
	}
	tw := tar.NewWriter(f)
	entries := map[string][]byte{"oci-layout": []byte(`{"imageLayoutVersion":"1.0.0"}`), "index.json": index}
	for d, b := range blobs {
		entries["blobs/sha256/"+strings.TrimPrefix(d, "sha256:")] = b
	}
	paths := make([]string, 0, len(entries))
	for p := range entries {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if err := tw.WriteHeader(&tar.Header{Name: p, Mode: 0o644, Size: int64(len(entries[p])), ModTime: time.Unix(0, 0)}); err != nil {
			f.Close()
			return fmt.Errorf("write image tar: %w", err)
		}
		if _, err := tw.Write(entries[p]); err != nil {
			f.Close()
			return fmt.Errorf("write image tar: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return fmt.Errorf("write image tar: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write image tar: %w", err)
	}
	return nil
}
