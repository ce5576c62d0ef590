package testenv

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ManagerImageArchive is the manager's image in bin/images as `make test-e2e` and `make
// run-installed` write it (make image IMG=$(LOCAL_IMG) MANAGER_IMAGE=...): the real node loads it
// (LocalOptions.RealNodeImages). A release image of `make image` is manager.tar, left alone.
const ManagerImageArchive = "local-manager.tar"

// Image is what an image archive (`docker save`'s format, which `ctr images import` takes) says
// of its image: its tag, the config's user, entrypoint and working directory, and the paths of
// its files with their modes.
type Image struct {
	Tag        string
	User       string
	Entrypoint []string
	WorkingDir string
	Files      map[string]fs.FileMode
}

// ReadImage reads the image of an archive of bin/images.
func ReadImage(name string) (*Image, error) {
	dir, err := ImagesDir()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, name)
	archive, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s (make test-e2e and make run-installed write it): %w", path, err)
	}
	defer archive.Close()
	entries := map[string][]byte{}
	if err := eachTarEntry(archive, func(h *tar.Header, r io.Reader) error {
		data, err := io.ReadAll(r)
		entries[h.Name] = data
		return err
	}); err != nil {
		return nil, fmt.Errorf("reading %s (make test-e2e and make run-installed write it): %w", path, err)
	}
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(entries["manifest.json"], &manifest); err != nil || len(manifest) != 1 || len(manifest[0].RepoTags) != 1 {
		return nil, fmt.Errorf("%s holds no manifest of one tagged image: %v", path, err)
	}
	var config struct {
		Config struct {
			User       string
			Entrypoint []string
			WorkingDir string
		} `json:"config"`
	}
	if err := json.Unmarshal(entries[manifest[0].Config], &config); err != nil {
		return nil, fmt.Errorf("%s: the image's config: %w", path, err)
	}
	img := &Image{Tag: manifest[0].RepoTags[0], User: config.Config.User, Entrypoint: config.Config.Entrypoint,
		WorkingDir: config.Config.WorkingDir, Files: map[string]fs.FileMode{}}
	for _, layer := range manifest[0].Layers {
		data, ok := entries[layer]
		if !ok {
			return nil, fmt.Errorf("%s: layer %s is missing", path, layer)
		}
		if err := eachTarEntry(bytes.NewReader(data), func(h *tar.Header, _ io.Reader) error {
			img.Files[strings.TrimSuffix(h.Name, "/")] = h.FileInfo().Mode()
			return nil
		}); err != nil {
			return nil, fmt.Errorf("%s: layer %s: %w", path, layer, err)
		}
	}
	return img, nil
}

// eachTarEntry calls f with each entry of a tar stream, gzipped or not.
func eachTarEntry(stream io.Reader, f func(*tar.Header, io.Reader) error) error {
	buffered := bufio.NewReader(stream)
	var r io.Reader = buffered
	if magic, _ := buffered.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(buffered)
		if err != nil {
			return err
		}
		defer gz.Close()
		r = gz
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := f(h, tr); err != nil {
			return err
		}
	}
}
