// Command deviceplugin is the kube bed's stand-in for the Ascend device plugin (issue 37): it
// speaks the kubelet's real device-plugin API (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1),
// advertises N fake NPUs as huawei.com/Ascend910 (device IDs Ascend910-<i>, as MindCluster's
// Ascend device plugin names them) and, in Allocate, gives the
// container ASCEND_VISIBLE_DEVICES = the physical indices the kubelet chose, ascending. The
// kubelet therefore hands NPUs only to containers whose limits ask for them.
//
//	deviceplugin --dir <kubelet root>/device-plugins [--count 8] [--resource huawei.com/Ascend910]
//
// It re-registers when the kubelet restarts (the kubelet wipes the directory, and our socket).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	devices []*pluginapi.Device
	prefix  string
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices}); err != nil {
		return err
	}
	<-s.Context().Done() // the fake NPUs never change health
	return nil
}

func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		ids := make([]int, 0, len(c.DevicesIDs))
		for _, id := range c.DevicesIDs {
			n, err := strconv.Atoi(strings.TrimPrefix(id, p.prefix))
			if err != nil || !strings.HasPrefix(id, p.prefix) {
				return nil, fmt.Errorf("unknown device %q", id)
			}
			ids = append(ids, n)
		}
		sort.Ints(ids)
		parts := make([]string, len(ids))
		for i, n := range ids {
			parts[i] = strconv.Itoa(n)
		}
		log.Printf("allocate %v -> ASCEND_VISIBLE_DEVICES=%s", c.DevicesIDs, strings.Join(parts, ","))
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{"ASCEND_VISIBLE_DEVICES": strings.Join(parts, ",")},
		})
	}
	return resp, nil
}

func (p *plugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

func register(dir, endpoint, resource string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := grpc.DialContext(ctx, "unix://"+filepath.Join(dir, "kubelet.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithBlock())
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: endpoint, ResourceName: resource})
	return err
}

func main() {
	dir := flag.String("dir", "", "the kubelet's device-plugins directory (<root-dir>/device-plugins)")
	count := flag.Int("count", 8, "NPUs to advertise")
	resource := flag.String("resource", "huawei.com/Ascend910", "extended resource name")
	flag.Parse()
	if *dir == "" {
		log.Fatal("--dir is required")
	}
	name := (*resource)[strings.LastIndex(*resource, "/")+1:]
	p := &plugin{prefix: name + "-"}
	for i := 0; i < *count; i++ {
		p.devices = append(p.devices, &pluginapi.Device{ID: fmt.Sprintf("%s%d", p.prefix, i), Health: pluginapi.Healthy})
	}
	endpoint := "kube-bed-" + strings.ToLower(name) + ".sock"
	sock := filepath.Join(*dir, endpoint)
	for {
		os.Remove(sock)
		lis, err := net.Listen("unix", sock)
		if err != nil {
			log.Printf("listen %s: %v (retrying)", sock, err)
			time.Sleep(time.Second)
			continue
		}
		srv := grpc.NewServer()
		pluginapi.RegisterDevicePluginServer(srv, p)
		go srv.Serve(lis)
		// A kubelet starting after us wipes the directory, our socket with it: then listen
		// again before registering (the kubelet dials back the endpoint we name).
		registered := false
		for present(sock) {
			if err := register(*dir, endpoint, *resource); err != nil {
				log.Printf("register with the kubelet: %v (retrying)", err)
				time.Sleep(time.Second)
				continue
			}
			registered = true
			log.Printf("registered %s: %d devices on %s", *resource, *count, sock)
			break
		}
		// The kubelet removes every socket in the directory when it restarts: serve until ours
		// is gone, then listen and register again.
		for registered && present(sock) {
			time.Sleep(2 * time.Second)
		}
		srv.Stop()
		log.Printf("%s removed (kubelet (re)started?): listening again", sock)
	}
}

func present(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
