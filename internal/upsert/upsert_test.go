package upsert

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

func TestPort(t *testing.T) {
	torchrun := corev1.ContainerPort{Name: "torchrun", ContainerPort: 29400, Protocol: corev1.ProtocolTCP}
	cases := map[string]struct {
		list, want []corev1.ContainerPort
	}{
		"a new port is added": {
			list: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 8080}},
			want: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 8080}, torchrun},
		},
		"a port of the same name is replaced": {
			list: []corev1.ContainerPort{{Name: "torchrun", ContainerPort: 1234}},
			want: []corev1.ContainerPort{torchrun},
		},
		"the same number under another name is replaced, not listed twice": {
			list: []corev1.ContainerPort{{Name: "rdzv", ContainerPort: 29400}, {Name: "metrics", ContainerPort: 8080}},
			want: []corev1.ContainerPort{torchrun, {Name: "metrics", ContainerPort: 8080}},
		},
		"an entry of the same name and another of the same number both give way to one": {
			list: []corev1.ContainerPort{{Name: "torchrun", ContainerPort: 1234}, {Name: "metrics", ContainerPort: 8080}, {Name: "rdzv", ContainerPort: 29400, Protocol: corev1.ProtocolTCP}},
			want: []corev1.ContainerPort{torchrun, {Name: "metrics", ContainerPort: 8080}},
		},
		"the same number over UDP is another port": {
			list: []corev1.ContainerPort{{Name: "rdzv", ContainerPort: 29400, Protocol: corev1.ProtocolUDP}},
			want: []corev1.ContainerPort{{Name: "rdzv", ContainerPort: 29400, Protocol: corev1.ProtocolUDP}, torchrun},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Port(tc.list, torchrun)); diff != "" {
				t.Errorf("ports (-want +got):\n%s", diff)
			}
		})
	}
}
