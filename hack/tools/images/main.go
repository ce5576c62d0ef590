// Command image-archive (bin/image-archive) writes a container image, as an archive that `ctr images import` loads, from a
// root file system folder: one layer holding the folder's files, modes and symbolic links, and a
// config with the entrypoint. The local cluster's real node has no registry; its images are
// written with this and loaded into its containerd (test/testenv). go-containerregistry writes
// the image's manifest, config and digests.
//
//	image-archive -rootfs DIR -tag REF -o FILE [-entrypoint /path,arg,...] [-user UID:GID] [-workdir DIR] [-arch GOARCH]
package main

import (
	"archive/tar"
	"bufio"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func main() {
	rootfs := flag.String("rootfs", "", "the root file system folder")
	tag := flag.String("tag", "", "the image's name and tag, e.g. localcluster.local/probe:v1")
	out := flag.String("o", "", "the archive to write")
	entrypoint := flag.String("entrypoint", "", "the entrypoint, its parts separated by commas")
	user := flag.String("user", "", "the user the image runs as, as UID:GID (Pod Security's runAsNonRoot needs a number)")
	workdir := flag.String("workdir", "", "the working directory")
	arch := flag.String("arch", "amd64", "the architecture of the image's programs, as GOARCH names it")
	flag.Parse()
	if *rootfs == "" || *tag == "" || *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := write(*rootfs, *tag, *out, *entrypoint, *user, *workdir, *arch); err != nil {
		log.Fatal(err)
	}
}

func write(rootfs, tag, out, entrypoint, user, workdir, arch string) error {
	ref, err := name.NewTag(tag)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	// The layer goes through a file: a root file system may be larger than memory should hold.
	layerTar := out + ".layer.tar"
	defer os.Remove(layerTar)
	if err := tarFolder(rootfs, layerTar); err != nil {
		return err
	}
	layer, err := tarball.LayerFromFile(layerTar)
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS = arch, "linux"
	cfg.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	if entrypoint != "" {
		cfg.Config.Entrypoint = strings.Split(entrypoint, ",")
	}
	cfg.Config.User, cfg.Config.WorkingDir = user, workdir
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}
	tmp := out + ".tmp"
	if err := tarball.WriteToFile(tmp, ref, img); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

// tarFolder is the folder's tree as a layer: paths relative to it, modes, owners and links kept,
// times zeroed so that the same folder gives the same image.
func tarFolder(root, out string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	tw := tar.NewWriter(w)
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == root {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(path); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		hdr.Name = filepath.ToSlash(rel)
		if d.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", "" // Owners by number, as the image's own /etc/passwd has them.
		hdr.ModTime, hdr.AccessTime, hdr.ChangeTime = time.Unix(0, 0), time.Time{}, time.Time{}
		hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := io.Copy(tw, f); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Close()
}
