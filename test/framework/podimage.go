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
	// PauseImage stands in for the pause image under its own reference, for pods whose containers run
	// it (scale tests' most common image): /podimage as /pause, which without arguments does what
	// /pause does with a signal, runs until SIGTERM or SIGINT and then exits 0 at once (pause.c's
	// sigdown). The real image cannot be pulled (no registry is reachable); its digest is not the
	// real one.
	PauseImage = "registry.k8s.io/pause:3.10"
)

// BuildPodImages builds ./test/podimage with CGO_ENABLED=0 and writes PodImage, SandboxImage and
// PauseImage as OCI image tarballs into dir, one layer each holding the binary, as /podimage (Entrypoint
// ["/podimage"]) and as /pause (Entrypoint ["/pause"]): images with IDs of their own, as the CRI names a
// container's image by its image ID's first tag. It returns their paths, in that order. The build error
// carries go build's output.
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
	for i, img := range podImages {
		p := filepath.Join(dir, fmt.Sprintf("image-%d.tar", i))
		if err := WriteImageTarConfig(p, img.ref, map[string][]byte{img.path: b}, ImageConfig{Entrypoint: []string{img.path}, User: img.user}); err != nil {
			return nil, fmt.Errorf("build pod image %s: %w", img.ref, err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// podImages are the images BuildPodImages writes: each reference, the binary's path in it, and the user
// it runs as. PauseImage runs as 65535:65535, as the real pause image does; that also gives it an image ID
// other than SandboxImage's (the CRI would otherwise name its containers' image by the other's tag).
var podImages = []struct{ ref, path, user string }{
	{PodImage, "/podimage", ""}, {SandboxImage, "/pause", ""}, {PauseImage, "/pause", "65535:65535"}}

// ImportPodImages builds PodImage, SandboxImage and PauseImage (BuildPodImages, in dir) and imports them
// as a pull from a registry leaves them: with a digest reference <repository>@sha256:<manifest digest>
// beside the tag (ctr import --base-name <repository> --digests), so that the CRI reports a container's
// imageID as for a pulled image.
func (c *Containerd) ImportPodImages(ctx context.Context, dir string) error {
	paths, err := BuildPodImages(ctx, dir)
	if err != nil {
		return err
	}
	for i, img := range podImages {
		repo := img.ref[:strings.LastIndex(img.ref, ":")]
		if err := c.ImportImage(ctx, paths[i], "--base-name", repo, "--digests"); err != nil {
			return err
		}
	}
	return nil
}
