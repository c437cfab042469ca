package framework

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The images real pods run on the harness's containerd: no registry is reachable, so both are built
// from test/podimage (a static Go binary: see its doc for its flags) and imported by ImportPodImages.
const (
	// PodImage is the containers' image: /podimage runs until SIGTERM, or --exit-after=D --exit-code=N.
	PodImage = "nodeagent.test/podimage:v1"
	// SandboxImage is the pod sandbox ("pause") image, containerd's sandbox_image in StartContainerd's
	// config: /podimage without arguments, which runs until SIGTERM as pause does.
	SandboxImage = "nodeagent.test/pause:3.6"
)

// BuildPodImages builds ./test/podimage with CGO_ENABLED=0 and writes PodImage and SandboxImage as OCI
// image tarballs into dir, one layer each holding the binary, as /podimage (Entrypoint ["/podimage"]) and
// as /pause (Entrypoint ["/pause"]): two images with IDs of their own, as the CRI names a container's
// image by its image ID's first tag. It returns their paths. The build error carries go build's output.
func BuildPodImages(ctx context.Context, dir string) ([]string, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(dir, "podimage")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "./test/podimage")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build test/podimage: %w\n%s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		return nil, fmt.Errorf("build pod images: %w", err)
	}
	var paths []string
	for i, img := range []struct{ ref, path string }{{PodImage, "/podimage"}, {SandboxImage, "/pause"}} {
		p := filepath.Join(dir, fmt.Sprintf("image-%d.tar", i))
		if err := WriteImageTarConfig(p, img.ref, map[string][]byte{img.path: b}, ImageConfig{Entrypoint: []string{img.path}}); err != nil {
			return nil, fmt.Errorf("build pod image %s: %w", img.ref, err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// ImportPodImages builds PodImage and SandboxImage (BuildPodImages, in dir) and imports them as a pull
// from a registry leaves them: with a digest reference <repository>@sha256:<manifest digest> beside the
// tag (ctr import --base-name <repository> --digests), so that the CRI reports a container's imageID
// as for a pulled image.
func (c *Containerd) ImportPodImages(ctx context.Context, dir string) error {
	paths, err := BuildPodImages(ctx, dir)
	if err != nil {
		return err
	}
	for i, ref := range []string{PodImage, SandboxImage} {
		repo := ref[:strings.LastIndex(ref, ":")]
		if err := c.ImportImage(ctx, paths[i], "--base-name", repo, "--digests"); err != nil {
			return err
		}
	}
	return nil
}
