package node_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"

	"github.com/nodeagent/nodeagent/pkg/kubeletserver"
	"github.com/nodeagent/nodeagent/pkg/node"
	"github.com/nodeagent/nodeagent/pkg/nodecache"
)

// statsPods is a PodProvider with Virtual Kubelet's GetStatsSummary.
type statsPods struct{ podRunner }

func (*statsPods) GetStatsSummary(context.Context) (*statsv1alpha1.Summary, error) {
	return &statsv1alpha1.Summary{Node: statsv1alpha1.NodeStats{NodeName: "from-provider"}}, nil
}

// statsHost is a Host with its machine's usage (the agent's: host.Stats) and cadvisor's collectors.
type statsHost struct{ host }

func (statsHost) GetStatsSummary(context.Context) (*statsv1alpha1.Summary, error) {
	return &statsv1alpha1.Summary{Node: statsv1alpha1.NodeStats{NodeName: "from-host"}}, nil
}

func (statsHost) CadvisorCollectors() []prometheus.Collector {
	return []prometheus.Collector{prometheus.NewGauge(prometheus.GaugeOpts{Name: "machine_cpu_cores", Help: "Number of logical CPU cores."})}
}

// TestKubeletServerStats: Controller.KubeletServer serves /stats/summary (and /metrics/resource) from
// the pod provider's GetStatsSummary, else the Host's, else 501; /metrics/cadvisor from the Host's
// cadvisor collectors, else 501.
func TestKubeletServerStats(t *testing.T) {
	runner := func() podRunner {
		return podRunner{started: map[types.UID]time.Time{}, stopped: map[types.UID]time.Time{}}
	}
	for _, tc := range []struct {
		name                   string
		pods                   node.PodProvider
		host                   node.Host
		wantSummary            string
		summaryCode, cadvisorC int
	}{
		{name: "provider's", pods: &statsPods{runner()}, host: statsHost{}, summaryCode: 200, wantSummary: `"nodeName": "from-provider"`, cadvisorC: 200},
		{name: "host's", pods: &podRunner{started: map[types.UID]time.Time{}, stopped: map[types.UID]time.Time{}}, host: statsHost{}, summaryCode: 200, wantSummary: `"nodeName": "from-host"`, cadvisorC: 200},
		{name: "no pods, host's", host: statsHost{}, summaryCode: 200, wantSummary: `"nodeName": "from-host"`, cadvisorC: 200},
		{name: "neither", host: host{}, summaryCode: 501, wantSummary: `does not implement GetStatsSummary`, cadvisorC: 501},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			factory := informers.NewSharedInformerFactory(client, 0)
			podInformer := factory.Core().V1().Pods().Informer()
			if err := podInformer.AddIndexers(node.PodIndexers()); err != nil {
				t.Fatal(err)
			}
			ctrl, err := node.New(node.Config{
				NodeName: "n", RegisterNode: true, MaxPods: 110,
				NodeStatusUpdateFrequency: 10 * time.Second, NodeStatusReportFrequency: 5 * time.Minute,
				NodeLeaseDurationSeconds: 40, AgentVersion: "v1.37.2-test",
				Host: tc.host, Runtime: containerRuntime{}, Pods: tc.pods,
				FallbackPodCIDR: netip.MustParsePrefix("10.244.7.0/24"),
			}, node.Dependencies{
				Client: client, HeartbeatClient: client,
				NodeLister: factory.Core().V1().Nodes().Lister(), Cache: nodecache.New(clock.RealClock{}),
				Recorder: &record.FakeRecorder{}, Pods: node.IndexedPodLister{Indexer: podInformer.GetIndexer()},
			})
			if err != nil {
				t.Fatal(err)
			}
			srv, err := ctrl.KubeletServer(&kubeletserver.Auth{
				Authenticator: authenticator.RequestFunc(func(*http.Request) (*authenticator.Response, bool, error) {
					return &authenticator.Response{User: &user.DefaultInfo{Name: "admin"}}, true, nil
				}),
				Authorizer: authorizerfactory.NewAlwaysAllowAuthorizer(),
			})
			if err != nil {
				t.Fatal(err)
			}
			get := func(path string) (int, string) {
				w := httptest.NewRecorder()
				srv.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
				return w.Code, w.Body.String()
			}
			if code, body := get("/stats/summary"); code != tc.summaryCode || !strings.Contains(body, tc.wantSummary) {
				t.Errorf("/stats/summary: %d %q, want %d with %q", code, body, tc.summaryCode, tc.wantSummary)
			}
			if code, body := get("/metrics/cadvisor"); code != tc.cadvisorC || (code == 200 && !strings.Contains(body, "machine_cpu_cores 0")) {
				t.Errorf("/metrics/cadvisor: %d %q, want %d", code, body, tc.cadvisorC)
			}
		})
	}
}
