package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/procfs"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	trainer "github.com/trainjob/operator/api/v1alpha1"
	utiltesting "github.com/trainjob/operator/internal/testing"
)

// The local cluster's real node: a kubelet with containerd, runc and the CNI plugins from
// Debian's packages, beside the fake nodes. Its pods run real processes, in the images of
// bin/images (ImagesDir); it is tainted, so that only pods that ask for it land there.
const (
	// RealNodeName is the real node's name.
	RealNodeName = "real-node"
	// RealNodeTaint keeps every pod off the real node but those that tolerate it (RealNodePod).
	RealNodeTaint = "localcluster.trainer.kubeflow.org/real-node"
	// RealNodeLabel marks the real node: type=real, where the fake nodes are type=kwok.
	RealNodeLabel = "real"
	// ProbeImage is the image of test/images/probe, which does what each framework's launcher
	// does with the operator's wiring; PauseImage the real node's pod sandbox.
	ProbeImage = "localcluster.local/probe:v1"
	PauseImage = "localcluster.local/pause:v1"
	// MPIImage is Debian with OpenSSH, Open MPI and Python 3, set up as mpi-operator's images
	// are (hack/images/mpi-rootfs.sh): what the shipped mpi-distributed runtime expects.
	MPIImage = "localcluster.local/mpi:v1"
	// TorchImage is Debian with python3-torch and /allreduce.py (hack/images/torch-rootfs.sh),
	// written by `make images-torch`.
	TorchImage = "localcluster.local/torch:v1"
	// podSubnet is the real node's pods' addresses.
	podSubnet = "10.244.0.0/24"
)

// RealNodePod makes a pod spec land on the real node: its node selector and toleration.
func RealNodePod(spec *corev1.PodSpec) {
	if spec.NodeSelector == nil {
		spec.NodeSelector = map[string]string{}
	}
	spec.NodeSelector[NodeLabel] = RealNodeLabel
	spec.Tolerations = append(spec.Tolerations, RealNodeToleration())
}

// RealNodeTrainJob makes a TrainJob's trainer run the probe's image on the real node: numNodes
// (unless 0: the runtime's), resources that fit the machine, and the real node's selector and
// toleration for the node job's pods. The caller gives it a command.
func RealNodeTrainJob(w *utiltesting.TrainJobWrapper, numNodes int32) *trainer.TrainJob {
	w.Trainer(&trainer.Trainer{})
	if numNodes > 0 {
		w.NumNodes(numNodes)
	}
	tj := w.PodSpecOverrides(trainer.PodSpecOverride{
		TargetJobs: []string{"node"},
		PodSpecPatch: trainer.PodSpecPatch{
			NodeSelector: map[string]string{NodeLabel: RealNodeLabel},
			Tolerations:  []corev1.Toleration{RealNodeToleration()},
		},
	}).Obj()
	tj.Spec.Trainer.Image = ptr.To(ProbeImage)
	tj.Spec.Trainer.ResourcesPerNode = &corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi"),
	}}
	return tj
}

// RealNodeToleration lets a pod onto the real node.
func RealNodeToleration() corev1.Toleration {
	return corev1.Toleration{Key: RealNodeTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
}

// RealNodeParts are the programs of Debian's packages a real node needs, and the packages that
// hold them: `apt-get install` them (hack/realnode-deps.sh does) when they are missing.
var RealNodeParts = map[string]string{
	"/usr/bin/containerd":     "containerd",
	"/usr/sbin/runc":          "runc",
	"/usr/lib/cni/bridge":     "containernetworking-plugins",
	"/usr/lib/cni/loopback":   "containernetworking-plugins",
	"/usr/lib/cni/host-local": "containernetworking-plugins",
	"/usr/bin/ctr":            "containerd",
	// kube-proxy's rules (LocalOptions.InCluster), and the bridge plugin's masquerading.
	"/usr/sbin/iptables-restore": "iptables",
}

// missingRealNodeParts lists the packages of RealNodeParts that are not installed.
func missingRealNodeParts() []string {
	var missing []string
	for path, pkg := range RealNodeParts {
		if _, err := os.Stat(path); err != nil && !slices.Contains(missing, pkg) {
			missing = append(missing, pkg)
		}
	}
	slices.Sort(missing)
	return missing
}

// NodeIP is this machine's first IPv4 address that is not loopback: the real node's address,
// which its pods reach through their bridge.
func NodeIP() (string, error) {
	ifaces, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	for _, iface := range ifaces {
		if iface.Flags&net.FlagUp == 0 || iface.Flags&net.FlagLoopback != 0 || strings.HasPrefix(iface.Name, "tj") {
			continue
		}
		addrs, err := iface.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if ipnet, ok := a.(*net.IPNet); ok && ipnet.IP.To4() != nil {
				return ipnet.IP.String(), nil
			}
		}
	}
	return "", errors.New("this machine has no IPv4 address but loopback: a real node's pods could not reach it")
}

// startRealNode starts containerd with its own root, state and socket in the cluster's folder,
// loads the images into it, and starts a kubelet that registers the real node, then waits until
// the node is Ready.
func (c *Cluster) startRealNode(ctx context.Context, extraImages []string) error {
	if missing := missingRealNodeParts(); len(missing) > 0 {
		return fmt.Errorf("a real node needs Debian's packages %s: run hack/realnode-deps.sh", strings.Join(missing, ", "))
	}
	if os.Geteuid() != 0 {
		return errors.New("a real node needs root: kubelet and containerd manage cgroups, mounts and network namespaces")
	}
	ip, err := NodeIP()
	if err != nil {
		return err
	}
	images, err := ImagesDir()
	if err != nil {
		return err
	}
	dir := filepath.Join(c.Dir, "real-node")
	for _, d := range []string{"containerd", "cni", "cni-ipam", "kubelet", "pods"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	started := time.Now()
	socket := filepath.Join(dir, "containerd.sock")
	files := map[string]string{
		"containerd.toml":              containerdConfig(dir, socket),
		"cni/10-localcluster.conflist": cniConfig(dir),
		"kubelet.yaml":                 kubeletConfig(dir, socket, ip),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	if err := c.run("/usr/bin/containerd", nil, "--config="+filepath.Join(dir, "containerd.toml")); err != nil {
		return err
	}
	// Once every program has stopped: the containers outlive containerd in their shims.
	c.cleanup = append(c.cleanup, func() { removeContainers(socket, dir) })
	if err := c.waitFor("containerd", func() bool { return ctr(socket, "version") == nil }); err != nil {
		return err
	}
	for _, image := range append([]string{"pause.tar", "probe.tar", "mpi.tar"}, extraImages...) {
		if err := ctr(socket, "images", "import", filepath.Join(images, image)); err != nil {
			return fmt.Errorf("loading %s into the real node's containerd: %w", image, err)
		}
	}
	if err := c.startDNS(ip); err != nil {
		return err
	}
	kubeconfig, err := c.Kubeconfig("kubelet")
	if err != nil {
		return err
	}
	if err := c.run("kubelet", nil, "--config="+filepath.Join(dir, "kubelet.yaml"), "--kubeconfig="+kubeconfig,
		"--root-dir="+filepath.Join(dir, "kubelet"), "--cert-dir="+filepath.Join(dir, "kubelet", "pki"),
		"--hostname-override="+RealNodeName, "--node-ip="+ip,
		"--node-labels="+NodeLabel+"="+RealNodeLabel, "-v=1"); err != nil {
		return err
	}
	if err := c.waitForNode(ctx, RealNodeName); err != nil {
		return err
	}
	if c.settings.local.InCluster {
		if err := c.startKubeProxy(ip); err != nil {
			return err
		}
	}
	c.RealNodeJoined = time.Since(started)
	return nil
}

// startDNS starts CoreDNS on the node's address, port 53: the real node's pods' name server
// (the kubelet's clusterDNS). It answers for the cluster's Services and pods, JobSet's pod host
// names among them, and asks this machine's resolver for the rest. No Service address stands in
// front of it: kube-proxy runs only in a cluster with in-cluster clients (LocalOptions.InCluster).
func (c *Cluster) startDNS(ip string) error {
	kubeconfig, err := c.Kubeconfig("coredns")
	if err != nil {
		return err
	}
	corefile := filepath.Join(c.Dir, "real-node", "Corefile")
	if err := os.WriteFile(corefile, []byte(`.:53 {
    bind `+ip+`
    errors
    cache 5
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig `+kubeconfig+`
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    forward . /etc/resolv.conf
}
`), 0o644); err != nil {
		return err
	}
	if err := c.run("coredns", nil, "-conf", corefile); err != nil {
		return err
	}
	return c.waitFor("CoreDNS", func() bool {
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(ip, "53"), time.Second)
		if err == nil {
			conn.Close()
		}
		return err == nil
	})
}

// removeContainers ends what the real node's containerd started and left behind once it
// stopped: its shims and every process under them (each container's), and the mounts under dir
// (the containers' root file systems, their volumes and network namespaces), deepest first.
func removeContainers(socket, dir string) {
	procs, err := procfs.AllProcs()
	if err != nil {
		return
	}
	children := map[int][]int{}
	var shims []int
	for _, p := range procs {
		if st, err := p.Stat(); err == nil {
			children[st.PPID] = append(children[st.PPID], p.PID)
		}
		if args, err := p.CmdLine(); err == nil && slices.Contains(args, socket) && strings.Contains(args[0], "containerd-shim") {
			shims = append(shims, p.PID)
		}
	}
	for len(shims) > 0 {
		pid := shims[0]
		shims = append(shims[1:], children[pid]...)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	mounts, err := procfs.GetMounts()
	if err != nil {
		return
	}
	var points []string
	for _, m := range mounts {
		if strings.HasPrefix(m.MountPoint, dir+"/") {
			points = append(points, m.MountPoint)
		}
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	for _, point := range points {
		_ = syscall.Unmount(point, syscall.MNT_DETACH)
	}
}

// TagRealNodeImage gives an image the real node holds a second name, as `kind load` puts an image
// under its name into a kind node's containerd: a pod that asks for it by that name runs it
// without pulling (a tag other than latest, so pulled only if not present).
func (c *Cluster) TagRealNodeImage(image, as string) error {
	socket := filepath.Join(c.Dir, "real-node", "containerd.sock")
	if err := ctr(socket, "images", "tag", "--force", image, as); err != nil {
		return fmt.Errorf("naming the real node's image %s %s: %w", image, as, err)
	}
	return nil
}

// ctr runs containerd's client against the real node's containerd, in the namespace of its
// Kubernetes containers.
func ctr(socket string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ctr", append([]string{"--address=" + socket, "--namespace=k8s.io"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// ImagesDir is where `make images` writes the real node's images: bin/images.
func ImagesDir() (string, error) {
	assets, err := AssetsDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(assets, "images"), nil
}

// containerdConfig is containerd's own configuration: its root, state and socket in dir, the CRI
// plugin's sandbox image, CNI from Debian's plugins with the configuration in dir. This
// machine's root may not lower a process's oom_score_adj: containerd must not try.
func containerdConfig(dir, socket string) string {
	return `version = 2
root = "` + filepath.Join(dir, "containerd", "root") + `"
state = "` + filepath.Join(dir, "containerd", "state") + `"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "` + socket + `"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "` + PauseImage + `"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "` + filepath.Join(dir, "cni") + `"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
`
}

// cniConfig puts the real node's pods on a bridge of their own, tj0, with addresses of
// podSubnet, routed and masqueraded through this machine.
func cniConfig(dir string) string {
	return `{
  "cniVersion": "0.4.0",
  "name": "localcluster",
  "plugins": [{
    "type": "bridge",
    "bridge": "tj0",
    "isGateway": true,
    "ipMasq": true,
    "ipam": {
      "type": "host-local",
      "ranges": [[{"subnet": "` + podSubnet + `"}]],
      "routes": [{"dst": "0.0.0.0/0"}],
      "dataDir": "` + filepath.Join(dir, "cni-ipam") + `"
    }
  }]
}
`
}

// kubeletConfig fits the kubelet to this machine: cgroups v1 with the cgroupfs driver and no
// per-QoS cgroups or node allocatable enforcement, swap allowed, no evictions for a full disk.
// Its API (logs, exec) is served on the node's address to anyone: a local cluster's. It syncs
// pods every 10 s rather than every minute, so that a Secret a pod mounts (the operator's
// certificate, which its rotation writes after the pod started) reaches it in seconds: tests
// wait less, and nothing they prove depends on how long.
func kubeletConfig(dir, socket, ip string) string {
	return `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: ` + ip + `
port: 10250
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
containerRuntimeEndpoint: unix://` + socket + `
podLogsDir: ` + filepath.Join(dir, "pods") + `
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failCgroupV1: false
failSwapOn: false
clusterDomain: cluster.local
clusterDNS: [` + ip + `]
resolvConf: /etc/resolv.conf
registerWithTaints:
- key: ` + RealNodeTaint + `
  effect: NoSchedule
evictionHard:
  memory.available: "0%"
  nodefs.available: "0%"
  imagefs.available: "0%"
syncFrequency: 10s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
`
}
